#pragma once
// The norms' CPU loops (their ops: kiln/ops/norm.cpp, norm_backward.cpp, channel_affine.cpp; their
// kernel-table entries: norm_ops.cpp here). batch_norm sees
// contiguous x as [P, Q, R] = [N, C, spatial], one statistic per channel q over P rows of R.
// Statistics and gradient sums accumulate in double, per channel in a fixed order (rows in order,
// a fixed lane split inside a row), so results never depend on the thread count.
#include "kiln/core/tensor.h"

namespace kiln {
namespace detail {

struct BatchGeom {
  int64_t p = 1, q = 1, r = 1;
};

// y = (x - mean) * rstd * weight + bias, with mean / var (biased) written per channel.
// weight and bias may be undefined.
void batch_norm_forward_kernel(const BatchGeom& g, double eps, const Tensor& x,
                               const Tensor& weight, const Tensor& bias, const Tensor& y,
                               const Tensor& mean, const Tensor& var);

// layer_norm / group_norm: x is `chunks` contiguous chunks of cg channels of r elements, one
// statistic per chunk; weight / bias (may be undefined) are indexed by channel
// (chunk % groups) * cg + c. layer_norm is groups = 1, cg = the normalized size, r = 1.
struct ChunkGeom {
  int64_t chunks = 1, groups = 1, cg = 1, r = 1;
};
void chunk_norm_forward_kernel(const ChunkGeom& g, double eps, const Tensor& x,
                               const Tensor& weight, const Tensor& bias, const Tensor& y,
                               const Tensor& mean, const Tensor& var);

// y = x * scale[q] + shift[q] (batch_norm in evaluation mode), rows split across threads.
void channel_affine_kernel(const BatchGeom& g, const Tensor& x, const Tensor& scale,
                           const Tensor& shift, const Tensor& y);
// The same for channels-last x and y (Note [channels-last]): `rows` rows of `channels` elements,
// the channel varying fastest. Each element is computed as channel_affine_kernel computes it.
void channel_affine_last_kernel(int64_t rows, int64_t channels, const Tensor& x,
                                const Tensor& scale, const Tensor& shift, const Tensor& y);

// The first-order gradient of batch_norm in two passes over (grad_out, x). grad_mean / grad_var
// are the gradients reaching the mean / var outputs (undefined: zero). Writes grad_input, and
// grad_weight / grad_bias where defined. All operands are contiguous and share x's dtype.
void batch_norm_backward_kernel(const BatchGeom& g, double eps, const Tensor& grad_out,
                                const Tensor& x, const Tensor& mean, const Tensor& var,
                                const Tensor& weight, const Tensor& grad_mean,
                                const Tensor& grad_var, const Tensor& grad_input,
                                const Tensor& grad_weight, const Tensor& grad_bias);

// batch_norm and its gradient on channels-last float32 tensors (norm_kernels_last.cpp, Note
// [channels-last batch norm]): `rows` = N*H*W rows of `channels` elements; grad_out, x and
// grad_input channels-last, the per-channel tensors contiguous, as above otherwise.
void batch_norm_forward_last_kernel(int64_t rows, int64_t channels, double eps, const Tensor& x,
                                    const Tensor& weight, const Tensor& bias, const Tensor& y,
                                    const Tensor& mean, const Tensor& var);
void batch_norm_backward_last_kernel(int64_t rows, int64_t channels, double eps,
                                     const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                     const Tensor& var, const Tensor& weight,
                                     const Tensor& grad_mean, const Tensor& grad_var,
                                     const Tensor& grad_input, const Tensor& grad_weight,
                                     const Tensor& grad_bias);

}  // namespace detail
}  // namespace kiln
