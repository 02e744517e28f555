#pragma once
// int8 inference state of Conv2d and Linear layers (Note [quantized layers]).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

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
// and after, and re-quantization from the float weights, need nothing else.
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

// The quantized layers of `model` as JSON: {"scheme": "int8-symmetric", "layers": {name:
// {"input_dtype", "input_scale", "folded_batch_norm"}}}, what a checkpoint records so that
// prepare_quantized can rebuild the buffers before the weights are loaded.
nlohmann::json quantization_spec(const Module& model);
// Makes the layers named in `spec` quantized (zero-filled buffers), so that a strict
// load_state_dict of a quantized model's weights fits. Unknown layer names, layers of another
// type and malformed entries are Errors naming them.
void prepare_quantized(Module& model, const nlohmann::json& spec, const Loc& loc = Loc::current());

// The int8 forward of a converted layer, x any floating [N, C, H, W] (Conv2d) or [..., in]
// (Linear); relu fused when asked.
Tensor quantized_forward(Module& layer, const LayerQuantization& q, const Tensor& x, bool relu,
                         const Loc& loc = Loc::current());

}  // namespace kiln::nn
