// CPU kernel of slice_backward (Note [kernel table]): zeros of the input's shape with the gradient
// copied into the sliced region. The definition, and the view ops beside it (which need no
// kernel), are in kiln/ops/shape_ops.cpp.
#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/slice_ops.h"

namespace kiln {

namespace {

void slice_backward_kernel(const Op& op, const std::vector<Tensor>& in,
                           const std::vector<Tensor>& out) {
  const detail::SliceBackwardAttrs& a = detail::slice_backward_attrs(op);
  zero_fill(out[0]);
  Tensor region = make_view(out[0], out[0].shape(), out[0].strides(), 0);
  copy_into(detail::slice_view(region, a.dim, a.start, a.end, a.step), in[0]);
}

KILN_REGISTER_KERNEL("slice_backward", DeviceType::CPU, slice_backward_kernel);

}  // namespace

}  // namespace kiln
