#pragma once
// Private helpers of the reduction family (reduce.cpp, reduce_stats.cpp, softmax.cpp) and the
// reference decompositions of the fused softmax ops, which tests compare the fused kernels with.
#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/reduce.h"

namespace kiln {
namespace detail {

// The dims of one reduction after wrapping and validation.
struct ReduceDims {
  std::vector<bool> reduced;  // per input dim
  Dims dims;                  // the reduced dims, ascending
  Shape keep_shape;           // output shape with keepdim (reduced dims become 1)
  Shape out_shape;            // output shape as requested (keepdim or not)
  int64_t count = 1;          // elements reduced into each output
};

// Wraps negative dims, rejects duplicates (naming the dim), and treats an empty list as all dims.
// A zero-dim tensor accepts dim 0 / -1 like PyTorch.
ReduceDims normalize_reduce_dims(std::string_view op, const Tensor& x, const Dims& dims,
                                 bool keepdim, const Loc& loc);

// The same for dims that already passed validation (vjps): never throws.
ReduceDims normalize_reduce_dims(const Shape& shape, const Dims& dims, bool keepdim);

// `g` (shaped like a reduction's output) reshaped to the keepdim shape so that it broadcasts
// against the input.
Tensor unsqueeze_reduced(const Tensor& g, const ReduceDims& rd);

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

namespace reference {

// Unfused decompositions into primitives: exp(x - logsumexp(x)) and x - logsumexp(x).
Tensor softmax(const Tensor& x, int64_t dim, const Loc& loc = Loc::current());
Tensor log_softmax(const Tensor& x, int64_t dim, const Loc& loc = Loc::current());

}  // namespace reference
}  // namespace kiln
