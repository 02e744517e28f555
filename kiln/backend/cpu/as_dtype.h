#pragma once
// as_dtype(): the operand conversion of the elementwise kernels with mixed-dtype inputs
// (binary_ops.cpp, compare_ops.cpp here): the operand itself when it already has the dtype, so
// the common path copies nothing.
#include "kiln/backend/cpu/loops.h"
#include "kiln/core/tensor.h"

namespace kiln::detail {

// `t` converted to `dt` (same shape, contiguous), recording nothing. Conversion to bool is
// "nonzero" (NaN counts as true, as in PyTorch).
inline Tensor as_dtype(const Tensor& t, DType dt) {
  if (t.dtype() == dt) return t;
  Tensor out = empty(t.shape(), {dt, t.device()});
  copy_into(out, t);
  return out;
}

}  // namespace kiln::detail
