#pragma once
// bmm on oneDNN's matmul primitive (float32, bfloat16, float16), with the primitive cache it
// builds; bmm's kernel-table entry (kiln/backend/onednn/linalg_ops.cpp) calls it.
#include "kiln/core/tensor.h"

namespace kiln::detail {

// out [B, M, N] = a [B, M, K] @ b [B, K, N], all of one dtype (float32, bfloat16 or float16; 16-bit
// products accumulate in float32), out contiguous; a and b may be strided views (Note [matmul
// strides]) or expanded in the batch dim. M, N and K are positive. Returns false, computing
// nothing, for a 16-bit dtype this CPU has only oneDNN's reference kernel for.
bool onednn_bmm(const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace kiln::detail
