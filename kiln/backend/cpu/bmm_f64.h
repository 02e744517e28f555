#pragma once
// bmm's float64 loop (Note [bmm loop] in bmm_f64.cpp): oneDNN has no float64 matmul. bmm's
// kernel-table entry (kiln/backend/onednn/linalg_ops.cpp) calls it.
#include "kiln/core/tensor.h"

namespace kiln::detail {

// out [B, M, N] = a [B, M, K] @ b [B, K, N], all float64, out contiguous; a may be any strided
// view, b is copied when its rows are not unit-stride. Summation order is fixed (ascending k).
void bmm_f64_kernel(const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace kiln::detail
