#pragma once
// Private entry header of the convolution family (conv.cpp, conv_affine.cpp, conv_backward.cpp):
// the fused epilogue, the output layout and kernel choice of a forward, and the kernels. It
// includes the geometry and checks (kiln/ops/conv_geometry.h) and the attributes and policy
// (kiln/ops/conv_attrs.h) that the ops share.
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/conv_attrs.h"
#include "kiln/ops/conv_geometry.h"

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

// The part of ep that oneDNN runs inside the convolution's kernel: all of it for float32 (unless
// only oneDNN's reference implementation would accept it), else nothing.
// conv_epilogue_forward_kernel applies the rest after the convolution.
ConvEpilogue fusable_epilogue(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                              const ConvEpilogue& ep);

// The layout conv_forward_kernel (or, with ep, conv_epilogue_forward_kernel) wants y in for input
// x (Note [channels-last]): channels-last when the primitive that will run writes NHWC, so that
// no reorder follows it; else contiguous.
MemoryFormat conv_output_format(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                bool with_bias, const ConvEpilogue* ep = nullptr);

// The kernel a forward convolution of input x runs under policy p (with the batch size and shape;
// Note [conv algorithm], Note [conv inference kind], Note [conv winograd]): oneDNN's
// implementation name, such as "jit_wino_4x3:avx512_core", or "kiln:reference" for float64. For
// tests and diagnostics.
std::string conv_forward_implementation(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                        bool with_bias);

// Kernels (outputs are contiguous or channels-last, of the inputs' dtype; inputs may have any
// layout).
// float32 runs oneDNN, float64 the reference loops, 16-bit floats oneDNN in float32.
void conv_forward_kernel(const ConvGeometry& g, ConvPolicy p, const Tensor& x, const Tensor& w,
                         const Tensor& b, const Tensor& y);
// `done` is fusable_epilogue(g, x, ep), which the caller has already looked up for the output's
// layout: oneDNN applies it inside the kernel, the rest of ep follows as the composition.
void conv_epilogue_forward_kernel(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                  const Tensor& w, const ConvEpilogue& ep, const ConvEpilogue& done,
                                  const Tensor& y);
void conv_backward_data_kernel(const ConvGeometry& g, const Tensor& gy, const Tensor& w,
                               const Tensor& gx);
void conv_backward_weights_kernel(const ConvGeometry& g, const Tensor& x, const Tensor& gy,
                                  const Tensor& gw);

// Multiply-adds x2 of a convolution whose output (or output gradient) is `activation` and whose
// weight (or weight gradient) is `weight` [O, C/groups, kH, kW]: the forward and both backwards
// of one geometry cost the same.
inline double conv_flops(const Tensor& activation, const Tensor& weight) {
  return weight.size(0) == 0 ? 0.0
                             : 2.0 * static_cast<double>(activation.numel()) *
                                   static_cast<double>(weight.numel() / weight.size(0));
}

}  // namespace detail
}  // namespace kiln
