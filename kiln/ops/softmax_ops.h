#pragma once
// The softmax family's shared pieces: the attributes that its ops' definitions (softmax.cpp) and
// their CPU kernel (kiln/backend/cpu/softmax_ops.cpp, Note [kernel table]) both need, and the
// reference decompositions that tests compare the fused kernel with.
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

// softmax and log_softmax: the dim (not yet wrapped).
struct SoftmaxAttrs {
  int64_t dim = -1;
};
const SoftmaxAttrs& softmax_attrs(const Op& op);

}  // namespace detail

namespace reference {

// Unfused decompositions into primitives: exp(x - logsumexp(x)) and x - logsumexp(x).
Tensor softmax(const Tensor& x, int64_t dim, const Loc& loc = Loc::current());
Tensor log_softmax(const Tensor& x, int64_t dim, const Loc& loc = Loc::current());

}  // namespace reference
}  // namespace kiln
