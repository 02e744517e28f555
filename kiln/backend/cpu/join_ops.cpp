// CPU kernel of cat (Note [kernel table]): each input is copied into its slot of the output along
// the dim. The definition (attributes, infer, vjp) is in kiln/ops/join.cpp.
#include "kiln/ops/join_ops.h"
#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

void cat_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& outs) {
  const Tensor& out = outs[0];
  const int64_t d = wrap_dim(detail::cat_attrs(op).dim, out.dim(), op.name());
  int64_t offset = 0;
  for (const Tensor& t : in) {
    if (detail::skipped_in_cat(t)) continue;
    if (t.numel() > 0) {
      Tensor slot =
          make_view(out, t.shape(), out.strides(), out.storage_offset() + offset * out.stride(d));
      copy_into(slot, t);
    }
    offset += t.dim_size(d);
  }
}

KILN_REGISTER_KERNEL("cat", DeviceType::CPU, cat_kernel);

}  // namespace

}  // namespace kiln
