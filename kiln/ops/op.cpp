#include "kiln/ops/op.h"

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

void Op::kernel(const std::vector<Tensor>&, const std::vector<Tensor>&) const {
  throw InternalError(
      fmt::format("kiln internal error: op '{}' has neither forward nor kernel", name()));
}

std::vector<Tensor> Op::vjp(const VjpContext&) const {
  throw Error(fmt::format("[{}] is not differentiable", name()));
}

}  // namespace kiln
