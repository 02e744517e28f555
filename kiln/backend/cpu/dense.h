#pragma once
// dense(): the operand copy that kernels needing plain memory (oneDNN's, kiln's own loops) take of
// an input of any layout or dtype; the input itself when it already is one, so no copy is made on
// the common path.
#include "kiln/backend/cpu/loops.h"
#include "kiln/core/tensor.h"

namespace kiln::detail {

// A contiguous copy of t (t itself when already contiguous), converted to dtype.
inline Tensor dense(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor out = empty(t.shape(), {dtype});
  copy_into(out, t);
  return out;
}

}  // namespace kiln::detail
