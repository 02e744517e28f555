#pragma once
// bmm on oneDNN's matmul primitive (float32), with the primitive cache it builds; bmm's
// kernel-table entry (kiln/backend/onednn/linalg_ops.cpp) calls it.
#include "kiln/core/tensor.h"

namespace kiln::detail {

// out [B, M, N] = a [B, M, K] @ b [B, K, N], all float32, out contiguous; a and b may be strided
// views (Note [matmul strides]) or expanded in the batch dim. M, N and K are positive.
void onednn_bmm(const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace kiln::detail
