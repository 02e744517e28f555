#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

// torch.matmul semantics: 1-D x 1-D is a dot product, a 1-D operand gets a dim prepended (left) or
// appended (right) and removed afterwards, batch dims broadcast. Runs on oneDNN for floating types.
Tensor matmul(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
// Batched matrix product of [B, M, K] and [B, K, N] (no broadcasting): the primitive matmul uses.
Tensor bmm(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
// torch.nn.functional.linear: input [..., in] times weight [out, in] transposed, plus bias [out]
// (undefined: none). One op of its own (ONNX Gemm), computed as matmul + add.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const Loc& loc = Loc::current());

namespace detail {
// "float32[2, 3]", for errors that print two operands around an '@'.
std::string matmul_desc(const Tensor& t);
// Rank (min_rank..max_rank), one floating dtype, matching inner sizes; errors name `op`.
void check_matmul_operands(const char* op, const Tensor& a, const Tensor& b, int64_t min_rank,
                           int64_t max_rank, const Loc& loc);
}  // namespace detail

}  // namespace kiln
