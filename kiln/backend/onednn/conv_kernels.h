#pragma once
// The convolution family's kernels on the CPU (float32 and 16-bit floats on oneDNN, float64 on
// the reference loops in kiln/backend/cpu/conv_reference.h), and the answers of its planner (Note
// [conv planner] in kiln/ops/conv_ops.h): the output layout and the fusable part of an epilogue.
// The kernel-table entries that call these are in conv_ops.cpp.
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/ops/conv_ops.h"

namespace kiln {
namespace detail {

// The part of ep that oneDNN runs inside the convolution's kernel: all of it for float32 (unless
// only oneDNN's reference implementation would accept it), else nothing.
// conv_epilogue_forward_kernel applies the rest after the convolution.
ConvEpilogue onednn_fusable_epilogue(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                     const ConvEpilogue& ep);

// The layout conv_forward_kernel (or, with ep, conv_epilogue_forward_kernel) wants y in for input
// x (Note [channels-last]): channels-last when the primitive that will run writes NHWC, so that
// no reorder follows it; else contiguous.
MemoryFormat onednn_conv_output_format(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
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

}  // namespace detail
}  // namespace kiln
