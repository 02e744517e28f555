// CPU kernels of the pooling family's ops (Note [kernel table]): max_pool2d(_with_indices),
// avg_pool2d, adaptive_avg_pool2d and their backward ops. The loops are in pool_kernels.cpp; the
// definitions (attributes, infer, vjp) in kiln/ops/pool.cpp and pool_backward.cpp.
#include "kiln/ops/pool_ops.h"
#include "kiln/backend/cpu/pool_kernels.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

// Outputs: the values and their flat per-plane indices.
void max_pool2d_kernel(const Op& op, const std::vector<Tensor>& in,
                       const std::vector<Tensor>& out) {
  detail::max_pool_kernel(detail::max_pool_attrs(op), in[0], out[0], out[1]);
}

void avg_pool2d_kernel(const Op& op, const std::vector<Tensor>& in,
                       const std::vector<Tensor>& out) {
  detail::avg_pool_kernel(detail::avg_pool_attrs(op), in[0], out[0]);
}

void adaptive_avg_pool2d_kernel(const Op&, const std::vector<Tensor>& in,
                                const std::vector<Tensor>& out) {
  detail::adaptive_avg_pool_kernel(in[0], out[0]);
}

// Inputs: grad and indices; the output's spatial size is the attrs' input_size (infer's shape).
void max_pool2d_backward_kernel(const Op& op, const std::vector<Tensor>& in,
                                const std::vector<Tensor>& out) {
  const int64_t bad = detail::max_pool_backward_kernel(in[0], in[1], out[0]);
  if (bad < 0) return;
  detail::fail_max_pool_indices(op, in[1], bad, out[0].dim_size(-2), out[0].dim_size(-1));
}

void avg_pool2d_backward_kernel(const Op& op, const std::vector<Tensor>& in,
                                const std::vector<Tensor>& out) {
  detail::avg_pool_backward_kernel(detail::avg_pool_backward_attrs(op), in[0], out[0]);
}

void adaptive_avg_pool2d_backward_kernel(const Op&, const std::vector<Tensor>& in,
                                         const std::vector<Tensor>& out) {
  detail::adaptive_avg_pool_backward_kernel(in[0], out[0]);
}

KILN_REGISTER_KERNEL("max_pool2d", DeviceType::CPU, max_pool2d_kernel);
KILN_REGISTER_KERNEL("max_pool2d_with_indices", DeviceType::CPU, max_pool2d_kernel);
KILN_REGISTER_KERNEL("avg_pool2d", DeviceType::CPU, avg_pool2d_kernel);
KILN_REGISTER_KERNEL("adaptive_avg_pool2d", DeviceType::CPU, adaptive_avg_pool2d_kernel);
KILN_REGISTER_KERNEL("max_pool2d_backward", DeviceType::CPU, max_pool2d_backward_kernel);
KILN_REGISTER_KERNEL("avg_pool2d_backward", DeviceType::CPU, avg_pool2d_backward_kernel);
KILN_REGISTER_KERNEL("adaptive_avg_pool2d_backward", DeviceType::CPU,
                     adaptive_avg_pool2d_backward_kernel);

}  // namespace

}  // namespace kiln
