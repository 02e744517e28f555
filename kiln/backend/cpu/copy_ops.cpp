// CPU kernels of clone and to_dtype (Note [kernel table]): one strided copy into the fresh output,
// converting the dtype where it differs. The definitions are in kiln/ops/copy_ops.cpp.
#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

void copy_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  copy_into(out[0], in[0]);
}

KILN_REGISTER_KERNEL("clone", DeviceType::CPU, copy_kernel);
KILN_REGISTER_KERNEL("to_dtype", DeviceType::CPU, copy_kernel);

}  // namespace

}  // namespace kiln
