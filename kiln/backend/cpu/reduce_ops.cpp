// CPU kernels of the primitive reductions (Note [kernel table]): sum, prod, max, min, argmax and
// argmin. The loops are in reduce_kernels.cpp; the definitions (attributes, infer, vjp) in
// kiln/ops/reduce.cpp.
#include "kiln/ops/reduce_ops.h"
#include "kiln/backend/cpu/reduce_kernels.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

// The dims that passed the op's infer.
std::vector<bool> reduced_dims(const Op& op, const Tensor& x) {
  const detail::ReduceAttrs& a = detail::reduce_attrs(op);
  return detail::normalize_reduce_dims(op.name(), x, a.dims, a.keepdim, Loc::current()).reduced;
}

void sum_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  detail::sum_kernel(in[0], out[0], reduced_dims(op, in[0]));
}

void prod_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  detail::prod_kernel(in[0], out[0], reduced_dims(op, in[0]));
}

template <bool kMax>
void extremum_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  detail::extremum_kernel(in[0], out[0], reduced_dims(op, in[0]), kMax);
}

template <bool kMax>
void arg_extremum_kernel(const Op& op, const std::vector<Tensor>& in,
                         const std::vector<Tensor>& out) {
  const detail::ReduceDims rd =
      detail::arg_reduce_dims(op.name(), detail::arg_reduce_attrs(op), in[0], Loc::current());
  detail::arg_extremum_kernel(in[0], out[0], rd.reduced, kMax);
}

KILN_REGISTER_KERNEL("sum", DeviceType::CPU, sum_kernel);
KILN_REGISTER_KERNEL("prod", DeviceType::CPU, prod_kernel);
KILN_REGISTER_KERNEL("max", DeviceType::CPU, extremum_kernel<true>);
KILN_REGISTER_KERNEL("min", DeviceType::CPU, extremum_kernel<false>);
KILN_REGISTER_KERNEL("argmax", DeviceType::CPU, arg_extremum_kernel<true>);
KILN_REGISTER_KERNEL("argmin", DeviceType::CPU, arg_extremum_kernel<false>);

}  // namespace

}  // namespace kiln
