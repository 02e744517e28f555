#pragma once
// The pooling family's CPU loops (Note [pooling kernels] in pool_kernels.cpp; their ops:
// kiln/ops/pool.cpp, pool_backward.cpp; their kernel-table entries: pool_ops.cpp here).
#include "kiln/core/tensor.h"
#include "kiln/ops/pool_ops.h"

namespace kiln {
namespace detail {

// Kernels: inputs of any layout, contiguous outputs shaped by the ops' inference.
void max_pool_kernel(const PoolParams& p, const Tensor& x, const Tensor& values,
                     const Tensor& indices);
// Checks every index against the plane size first (in parallel, throwing nothing: Note [index
// checks] in indexing.cpp): returns the flat position of the first index out of range (the
// smallest such position, whatever the thread count) without writing anything, or -1 once the
// gradient is written.
int64_t max_pool_backward_kernel(const Tensor& grad, const Tensor& indices, const Tensor& out);
void avg_pool_kernel(const AvgParams& a, const Tensor& x, const Tensor& out);
void avg_pool_backward_kernel(const AvgParams& a, const Tensor& grad, const Tensor& out);
void adaptive_avg_pool_kernel(const Tensor& x, const Tensor& out);
void adaptive_avg_pool_backward_kernel(const Tensor& grad, const Tensor& out);

}  // namespace detail
}  // namespace kiln
