#pragma once
// int8 inference state of Conv2d and Linear layers (Note [quantized layers]).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::nn {

class Module;
class BatchNorm;

// Note [quantized layers]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Post-training quantization (kiln/train/quantize.h) changes a trained model's Conv2d and Linear
// layers in place rather than swapping modules, because the model zoo's forwards call their
// layers by type (conv_bn(*conv1, *bn1, x)). Each such layer may hold a LayerQuantization:
//   - while calibrating, an observer: the layer still computes in float32 and shows the observer
//     every input it receives, and conv_bn records which batch norm follows the convolution;
//   - once converted (`active`): int8 weights (per output channel), an int32 bias and the float32
//     output scales, registered as the module's buffers weight_q, bias_q and out_scale (so they
//     are in state_dict and in checkpoints), and the input's scale and dtype. forward then runs
//     quantize_per_tensor and quantized_conv2d / quantized_linear (Note [int8 quantization] in
//     kiln/ops/quantize.h). A convolution whose batch norm was folded into its int8 weights runs
//     only through conv_bn, which then skips the batch norm; calling it alone is an error.
// Everything else (pooling, the residual adds, softmax, layers without an int8 kernel) stays in
// float32: the float fallback. The float32 parameters stay in the module, so evaluation before
// and after, and re-quantization from the float weights, need nothing else, until strip_float
// drops the ones only the float path reads (Note [stripped float weights]).
class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  virtual void observe(const Tensor& input) = 0;
};

struct LayerQuantization {
  std::shared_ptr<ActivationObserver> observer;  // calibrating
  const BatchNorm* calibrated_with = nullptr;    // conv_bn's batch norm, seen while calibrating
  bool active = false;                           // converted: forward runs in int8
  bool folded_batch_norm = false;
  std::string batch_norm;            // the folded batch norm's name in the model, when known
  bool float_stripped = false;       // strip_float dropped the float tensors (and the batch norm's)
  DType input_dtype = DType::UInt8;  // UInt8 for inputs that are never negative, else Int8
  double input_scale = 1.0;
  Tensor weight_q, bias_q, out_scale;  // handles of the module's buffers
};

// Where a Conv2d or Linear keeps its quantization state (nullptr for other modules).
std::shared_ptr<LayerQuantization>* quantization_slot(Module& layer);
// The layer's quantization state: nullptr unless a Conv2d or Linear with one.
LayerQuantization* layer_quantization(Module& layer);

// Sets up `layer` (a Conv2d or Linear) as converted: registers weight_q, bias_q and out_scale
// (zero-filled, to be loaded or written) and records the input's dtype and scale. An Error when
// the layer is already quantized.
LayerQuantization& make_quantized(Module& layer, DType input_dtype, double input_scale,
                                  bool folded_batch_norm, const Loc& loc = Loc::current());

// The quantized layers of `model` as JSON: {"scheme": "int8-symmetric", "float_stripped": bool,
// "layers": {name: {"type", "input_dtype", "input_scale", "folded_batch_norm", "batch_norm"?}}},
// what a checkpoint records so that prepare_quantized can rebuild the buffers (and strip the
// same float tensors) before the weights are loaded.
nlohmann::json quantization_spec(const Module& model);
// Makes the layers named in `spec` quantized (zero-filled buffers) and, for a stripped spec,
// strips the same float tensors, so that a strict load_state_dict of a quantized model's weights
// fits. Unknown layer names, layers of another type and malformed entries are Errors naming them.
void prepare_quantized(Module& model, const nlohmann::json& spec, const Loc& loc = Loc::current());

// Note [stripped float weights]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A converted model still holds the float32 weights its int8 layers were made from, which makes a
// saved int8 model larger than the float one. strip_float drops the tensors only the float path
// reads: every converted layer's weight and bias, and the weight, bias and running statistics of
// a batch norm folded into a convolution. They become empty ([0]) in place, so state_dict still
// names them (a strict load of the stripped file fits a model prepared from its spec) while a
// file holds a few bytes for each. The int8 forward reads none of them. What is lost: evaluating
// the layers in float32 again and re-quantizing from the float weights (keep the float run for
// that). Returns the stripped tensors' names; an Error when a converted convolution's folded batch
// norm is not known by name (a model converted by hand without conv_bn's calibration).
std::vector<std::string> strip_float(Module& model, const Loc& loc = Loc::current());

// The int8 forward of a converted layer, x any floating [N, C, H, W] (Conv2d) or [..., in]
// (Linear); relu fused when asked.
Tensor quantized_forward(Module& layer, const LayerQuantization& q, const Tensor& x, bool relu,
                         const Loc& loc = Loc::current());

}  // namespace kiln::nn
