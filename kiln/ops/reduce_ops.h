#pragma once
// The reduction family's shared pieces: what its ops' definitions (reduce.cpp, reduce_stats.cpp,
// and the reductions used by other ops' vjps) and their CPU kernels
// (kiln/backend/cpu/reduce_ops.cpp, Note [kernel table]) both need — dim normalization and each
// op's attributes.
#include <optional>
#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"
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

// sum, prod, max and min: the dims (empty: all) and keepdim.
struct ReduceAttrs {
  Dims dims;
  bool keepdim = false;
};
const ReduceAttrs& reduce_attrs(const Op& op);

// argmax and argmin: one dim, or none for an index into the flattened input (keepdim then keeps
// every dim as 1, like PyTorch).
struct ArgReduceAttrs {
  std::optional<int64_t> dim;
  bool keepdim = false;
};
const ArgReduceAttrs& arg_reduce_attrs(const Op& op);
// The dims an arg reduction reduces for input x.
ReduceDims arg_reduce_dims(std::string_view op, const ArgReduceAttrs& a, const Tensor& x,
                           const Loc& loc);

}  // namespace detail
}  // namespace kiln
