// CPU kernels of the assignment ops copy_ and fill_ (Note [kernel table]): they write into their
// first input, which the definitions' forward() passes as the output (Note [effects]). The
// definitions (infer, effects) are in kiln/ops/assign.cpp.
#include "kiln/ops/assign_ops.h"
#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

// self <- src, converting the dtype (src has self's shape or is zero-dim); nothing to do when src
// is self.
void copy_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  if (!in[1].is_same(out[0])) copy_into(out[0], in[1]);
}

void fill_kernel(const Op& op, const std::vector<Tensor>&, const std::vector<Tensor>& out) {
  if (out[0].numel() == 0) return;
  copy_into(out[0], scalar_tensor(detail::fill_attrs(op).value, {DType::Float64}));
}

KILN_REGISTER_KERNEL("copy_", DeviceType::CPU, copy_kernel);
KILN_REGISTER_KERNEL("fill_", DeviceType::CPU, fill_kernel);

}  // namespace

}  // namespace kiln
