#include "kiln/ops/op.h"

#include "kiln/ops/kernel_table.h"

namespace kiln {

std::vector<Tensor> Op::forward(const std::vector<Tensor>& inputs,
                                const std::vector<TensorMeta>& metas) const {
  std::vector<Tensor> outputs;
  outputs.reserve(metas.size());
  for (const TensorMeta& m : metas)
    outputs.push_back(empty(m.shape, {m.dtype, m.device, false, m.memory_format}));
  kernel(inputs, outputs);
  return outputs;
}

void Op::kernel(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) const {
  const Device device = !outputs.empty()  ? outputs[0].device()
                        : !inputs.empty() ? inputs[0].device()
                                          : kCPU;
  if (KernelFn fn = find_kernel(*this, device.type)) return fn(*this, inputs, outputs);
  throw InternalError(
      fmt::format("kiln internal error: op '{}' has no kernel for device {} (Note [kernel table])",
                  name(), device.name()));
}

std::vector<Tensor> Op::vjp(const VjpContext&) const {
  throw Error(fmt::format("[{}] is not differentiable", name()));
}

}  // namespace kiln
