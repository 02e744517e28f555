#pragma once
// The primitive reductions' CPU loops (their ops: kiln/ops/reduce.cpp; their kernel-table
// entries: reduce_ops.cpp here).
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {
namespace detail {

// Kernels of the primitive reductions over the dims marked in `reduced` (ReduceDims::reduced).
// x may have any layout; out is contiguous with the op's output dtype: sum and prod give int64
// for integer and bool inputs, max/min keep the dtype, the arg kernels write int64 indices. Every
// output accumulates in a fixed order (Note [deterministic reduction] in reduce_kernels.cpp).
void sum_kernel(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced);
void prod_kernel(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced);
void extremum_kernel(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced,
                     bool is_max);
void arg_extremum_kernel(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced,
                         bool is_max);

}  // namespace detail
}  // namespace kiln
