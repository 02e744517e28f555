#pragma once
// The convolution family's shared pieces: what its ops' definitions (conv.cpp, conv_backward.cpp,
// conv_affine.cpp, conv_bn_fold.cpp) and their kernels (kiln/backend/onednn/conv_ops.cpp,
// backend/cpu/conv_bn_fold.cpp; Note [kernel table]) both need — each op's attributes, the fused
// epilogue, and the planner through which a definition asks the backend about layouts (Note
// [conv planner]). It includes the geometry and checks (conv_geometry.h) and the attributes and
// policy (conv_attrs.h).
#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/conv_attrs.h"
#include "kiln/ops/conv_geometry.h"
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

// Note [conv epilogue]: what conv2d_affine fuses after a forward convolution,
// y = relu?(conv(x, w) * scale[o] + shift[o] + residual). On float32 the scale is folded into the
// weights (conv(x, w * scale) = conv(x, w) * scale per output channel), the shift is the
// convolution's bias, and oneDNN post-ops (sum for the residual, eltwise relu) finish each output
// tile while it is still in registers: the output is written once instead of being read and
// written again by channel_affine, add and relu. The folded weight is computed once and cached with
// the blocked weights (Note [conv weight cache]), keyed by the scale's values as well. Per-channel
// binary post-ops, the first version of this, ran oneDNN's direct (batched) kernels ~30% slower
// and its reference implementation when combined with sum; with folding, every batch size fuses.
struct ConvEpilogue {
  Tensor scale, shift;  // [O] each, or both undefined
  Tensor residual;      // the output's shape, or undefined
  bool relu = false;
};

// Note [conv planner]
// ~~~~~~~~~~~~~~~~~~~
// Two answers a convolution's definition needs come from the primitive that will run it: the
// output's layout (infer must give it: Note [channels-last], faithful meta) and how much of an
// epilogue fuses into the kernel (conv2d_affine's infer, and whether conv2d_affine() emits the
// fused op at all). The definitions may not include the backend (DESIGN.md's layers), so the
// backend that runs convolutions on the CPU (kiln/backend/onednn/conv_ops.cpp) registers these
// queries at load time, as it registers its kernels (Note [kernel table]). Meta tensors get the
// CPU backend's answers, so meta and eager agree on layouts. Without a registered planner the
// answers are the plain ones: contiguous outputs, nothing fused.
struct ConvPlanner {
  // The layout the forward kernel (with ep: the epilogue kernel) writes y in for input x.
  MemoryFormat (*output_format)(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                bool with_bias, const ConvEpilogue* ep) = nullptr;
  // The part of ep that the kernel runs inside the convolution; the rest follows as the
  // composition.
  ConvEpilogue (*fusable_epilogue)(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                   const ConvEpilogue& ep) = nullptr;
  // Whether training convolutions run faster on channels-last activations than on NCHW ones on
  // this CPU (Note [channels-last training] in kiln/backend/onednn/conv_primitives.h).
  bool (*prefers_channels_last_training)() = nullptr;
};
// At load time, from a backend file; a second planner is an internal error.
bool register_conv_planner(const ConvPlanner& planner);

// The registered planner's answers (Note [conv planner]).
MemoryFormat conv_output_format(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                bool with_bias, const ConvEpilogue* ep = nullptr);
ConvEpilogue fusable_epilogue(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                              const ConvEpilogue& ep);
bool conv_prefers_channels_last_training();

// Multiply-adds x2 of a convolution whose output (or output gradient) is `activation` and whose
// weight (or weight gradient) is `weight` [O, C/groups, kH, kW]: the forward and both backwards
// of one geometry cost the same.
inline double conv_flops(const Tensor& activation, const Tensor& weight) {
  return weight.dim_size(0) == 0 ? 0.0
                                 : 2.0 * static_cast<double>(activation.numel()) *
                                       static_cast<double>(weight.numel() / weight.dim_size(0));
}

// The attributes of conv2d (Conv2dOp in conv.cpp): the options, and the purpose conv2d()
// resolved (Note [conv algorithm]). Inputs: input, weight[, bias].
struct Conv2dAttrs {
  Conv2dOptions options;
  ConvPurpose purpose = ConvPurpose::kTraining;
  ConvPolicy policy() const { return {options.algorithm, purpose}; }
};
const Conv2dAttrs& conv2d_attrs(const Op& op);

// The attributes of conv2d_affine (conv_affine.cpp). Inputs: input, weight, scale, shift[,
// residual].
struct Conv2dAffineAttrs {
  Conv2dOptions options;
  ConvPurpose purpose = ConvPurpose::kTraining;
  bool relu = false;
  ConvPolicy policy() const { return {options.algorithm, purpose}; }
  ConvEpilogue epilogue(const std::vector<Tensor>& in) const {
    return {in[2], in[3], in.size() > 4 ? in[4] : Tensor(), relu};
  }
};
const Conv2dAffineAttrs& conv2d_affine_attrs(const Op& op);

// The attributes of conv2d_backward_input and conv2d_backward_weight (conv_backward.cpp).
struct Conv2dBackwardInputAttrs {
  Size2 input_size = 1;
  Conv2dOptions options;
};
const Conv2dBackwardInputAttrs& conv2d_backward_input_attrs(const Op& op);
struct Conv2dBackwardWeightAttrs {
  Size2 kernel_size = 1;
  Conv2dOptions options;
};
const Conv2dBackwardWeightAttrs& conv2d_backward_weight_attrs(const Op& op);

// The shape of the conv2d input whose gradient conv2d_backward_input(grad, w) is, and of the
// weight whose gradient conv2d_backward_weight(x, grad) is.
Shape conv_backward_input_shape(const Tensor& grad, const Shape& w, int64_t groups, Size2 size);
Shape conv_backward_weight_shape(const Tensor& x, const Tensor& grad, int64_t groups,
                                 Size2 kernel_size);

// The attributes of conv_bn_fold (conv_bn_fold.cpp). Inputs: running_mean, running_var, then
// weight, bias and conv_bias where present.
struct ConvBnFoldAttrs {
  double eps = 1e-5;
  bool has_weight = false, has_bias = false, has_conv_bias = false;
};
const ConvBnFoldAttrs& conv_bn_fold_attrs(const Op& op);

}  // namespace detail
}  // namespace kiln
