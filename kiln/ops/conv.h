#pragma once
// 2-D convolution (torch.nn.functional.conv2d / conv_transpose2d semantics), NCHW layout.
#include <concepts>
#include <cstdint>
#include <string>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {

// A (height, width) pair: one integer means the same value for both, as in PyTorch.
struct Size2 {
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  Size2(std::pair<int64_t, int64_t> hw) : h(hw.first), w(hw.second) {}  // NOLINT
  int64_t h;
  int64_t w;
};

// Note [conv padding]: padding is one of
//   - an int or an (h, w) pair: that many zeros on both sides (PyTorch);
//   - "valid": no padding;
//   - "same": the output has ceil(in / stride) rows and columns. The total padding of a dim is
//     max((ceil(in / stride) - 1) * stride + (k - 1) * dilation + 1 - in, 0); the begin side
//     (top/left) gets total / 2 and the end side (bottom/right) the rest, so an odd total puts the
//     extra row/column at the bottom/right. This is TensorFlow's SAME, and equals PyTorch's
//     padding="same" where PyTorch allows it (stride 1); PyTorch rejects "same" with stride > 1,
//     kiln follows TensorFlow there.
//   - Padding::asymmetric(top, bottom, left, right): explicit per-side padding (ONNX's pads; the
//     gradients of a "same" convolution use it).
// Any other string is an error of the op that receives it, listing the valid values.
class Padding {
 public:
  enum class Kind { kExplicit, kSame, kValid, kInvalid };

  template <std::integral I>
  Padding(I both)  // NOLINT(google-explicit-constructor)
      : Padding(static_cast<int64_t>(both), static_cast<int64_t>(both)) {}
  Padding(int64_t h, int64_t w) : top(h), bottom(h), left(w), right(w) {}
  Padding(std::pair<int64_t, int64_t> hw)  // NOLINT(google-explicit-constructor)
      : Padding(hw.first, hw.second) {}
  Padding(const char* mode) : Padding(std::string(mode)) {}  // NOLINT
  Padding(std::string mode);                                 // NOLINT
  static Padding asymmetric(int64_t top, int64_t bottom, int64_t left, int64_t right);

  // "same", "valid", the unrecognized text, or "[top, bottom, left, right]".
  std::string str() const;

  Kind kind = Kind::kExplicit;
  int64_t top = 0, bottom = 0, left = 0, right = 0;  // kExplicit only
  std::string mode;                                  // the text given for a string mode
};

// Note [conv algorithm]
// ~~~~~~~~~~~~~~~~~~~~~
// Which kernel a forward convolution runs is the caller's explicit policy, never a function of
// grad mode read by the kernel (DESIGN.md: an op means the same thing in every mode):
//   - kAuto (the default): Winograd (Note [conv winograd] in
//     kiln/backend/onednn/conv_primitives.h) for inference of a batch (more than one image) of
//     float32 3x3, stride-1, dilation-1, ungrouped convolutions with at least 16 input channels;
//     the direct kernels everywhere else.
//   - kDirect: never Winograd (oneDNN's direct/brgemm kernels, or the float64 reference loops).
//   - kWinograd: Winograd for every float32 convolution that oneDNN has a Winograd kernel for,
//     whatever the batch, channel count or purpose. Where it has none (other kernel sizes,
//     strides, dilations, groups, some fused epilogues; float64, which runs the reference loops)
//     the direct kernel of kDirect runs instead: like torch.backends' algorithm flags, this is a
//     preference, not a requirement, so one setting can cover a whole model.
// Winograd rounds differently from the direct kernels (within 1e-5 of the largest output).
//
// The public functions (conv2d, conv2d_affine) also resolve, at call time, what the call is for,
// and store it with the algorithm in the op's attributes: "purpose" is "training" when a gradient
// is recorded for this call (grad mode on and an input requires grad), else "inference".
// Inference lets kAuto choose Winograd, caches the weights' blocked copy (Note [conv weight
// cache]), may leave the output in oneDNN's blocked layout (Note [blocked activations]) and asks
// oneDNN for its inference kernels at batch 1 (Note [conv inference kind]); training does none of
// these, so gradients keep the direct kernels' numerics and no cache holds weights that change
// every step. The op's kernel reads only these attributes, so a recorded op (name + attrs) gives
// bit-identical results when replayed in any grad mode.
enum class ConvAlgorithm { kAuto, kDirect, kWinograd };

struct Conv2dOptions {
  Size2 stride = 1;
  Padding padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  ConvAlgorithm algorithm = ConvAlgorithm::kAuto;  // Note [conv algorithm]
};

// input [N, C, H, W] (or unbatched [C, H, W]), weight [O, C / groups, kH, kW], bias [O] or an
// undefined Tensor for none. Output [N, O, Ho, Wo] with Ho = (H + pad_top + pad_bottom -
// dilation * (kH - 1) - 1) / stride + 1 (floor). All operands share one floating dtype; float32
// runs on oneDNN, float64 on a reference loop (fixed summation order), 16-bit floats compute in
// float32. options.algorithm picks the kernel (Note [conv algorithm]): by default, a batch of 3x3
// stride-1 float32 convolutions with no gradient recorded runs oneDNN's Winograd kernel (within
// 1e-5 of the largest output, as tested).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {}, const Loc& loc = Loc::current());

// Note [conv epilogue]: relu?(conv2d(input, weight) * scale + shift + residual) with scale and
// shift [O] per output channel and residual (may be undefined) of the output's shape: a
// convolution followed by batch_norm in evaluation mode (scale = weight / sqrt(running_var +
// eps), shift = bias - running_mean * scale), the residual add and relu of a ResNet block. input
// must be rank 4. Without gradients it runs as one fused kernel (on float32: the scale folded into
// the weights, the shift as bias, oneDNN post-ops for the rest; the rounding differs from the
// composition's, results agree within 1e-5 relative, as tested); when a gradient is recorded
// (grad mode on and an input requires grad), the composition of conv2d, channel_affine, add and
// relu runs instead, so gradients are exact (Note [conv2d_affine emits] in conv_affine.cpp).
Tensor conv2d_affine(const Tensor& input, const Tensor& weight, const Tensor& scale,
                     const Tensor& shift, const Tensor& residual = Tensor(), bool relu = false,
                     const Conv2dOptions& options = {}, const Loc& loc = Loc::current());
// The gradient of conv2d with respect to its input, for an input of input_size (H, W): grad
// [N, O, Ho, Wo] and weight [O, C / groups, kH, kW] give [N, C, H, W]. input_size is needed
// because with stride > 1 several input sizes give the same output size. This is also the
// definition of conv_transpose2d.
Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight, Size2 input_size,
                             const Conv2dOptions& options = {}, const Loc& loc = Loc::current());

// The gradient of conv2d with respect to its weight: input [N, C, H, W] and grad [N, O, Ho, Wo]
// give [O, C / groups, kernel_size.h, kernel_size.w]. (The bias gradient is sum(grad, {0, 2, 3}).)
Tensor conv2d_backward_weight(const Tensor& input, const Tensor& grad, Size2 kernel_size,
                              const Conv2dOptions& options = {}, const Loc& loc = Loc::current());

struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;  // removed from both sides of the output, as in PyTorch
  Size2 output_padding = 0;
  int64_t groups = 1;
  Size2 dilation = 1;
};

// torch.nn.functional.conv_transpose2d: input [N, C, H, W] (or [C, H, W]), weight
// [C, O / groups, kH, kW], bias [O] or undefined. Output size (H - 1) * stride - 2 * padding +
// dilation * (kH - 1) + output_padding + 1. It is conv2d_backward_input of that output size (plus
// the bias), so its gradients are conv2d and conv2d_backward_weight. kiln requires
// output_padding < stride (PyTorch also accepts output_padding < dilation; such outputs are not
// the adjoint of any conv2d and are not supported).
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose2dOptions& options = {},
                        const Loc& loc = Loc::current());

}  // namespace kiln
