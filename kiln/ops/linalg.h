#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

// torch.matmul semantics: 1-D x 1-D is a dot product, a 1-D operand gets a dim prepended (left) or
// appended (right) and removed afterwards, batch dims broadcast. Runs on oneDNN for floating types.
Tensor matmul(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
// Batched matrix product of [B, M, K] and [B, K, N] (no broadcasting): the primitive matmul uses.
Tensor bmm(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());

}  // namespace kiln
