#pragma once
// The slice ops' shared pieces: what slice_backward's definition (shape_ops.cpp) and its CPU
// kernel (kiln/backend/cpu/shape_ops.cpp, Note [kernel table]) both need — its attributes and the
// view that slice() makes, without a dispatch.
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

// slice_backward: the input's shape and the slice of it that the gradient fills.
struct SliceBackwardAttrs {
  Shape shape;
  int64_t dim = 0, start = 0, end = 0, step = 1;
};
const SliceBackwardAttrs& slice_backward_attrs(const Op& op);

// The view slice(x, dim, start, end, step) makes, made directly (no dispatch), for a kernel whose
// op's infer validated the slice.
Tensor slice_view(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step);

}  // namespace detail
}  // namespace kiln
