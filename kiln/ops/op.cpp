#include "kiln/ops/op.h"

#include <algorithm>

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

// Note [size-free backward]: the recorded sizes where this thread's trace can use them.
SymSizes VjpContext::sizes_of(size_t input) const {
  if (input_sizes != nullptr && input < input_sizes->size()) {
    const SymSizes& s = (*input_sizes)[input];
    if (!s.empty() && std::all_of(s.begin(), s.end(), detail::sym_usable)) return s;
  }
  const Shape& shape = input_metas.at(input).shape;
  return SymSizes(shape.begin(), shape.end());
}

SymInt VjpContext::size_of(size_t input, int64_t dim) const {
  const SymSizes s = sizes_of(input);
  return s[static_cast<size_t>(wrap_dim(dim, static_cast<int64_t>(s.size()), "size"))];
}

SymInt VjpContext::sym_attr(std::string_view path, int64_t value) const {
  if (sym_attrs != nullptr)
    for (const SymAttr& a : *sym_attrs)
      if (a.path == path && a.value.hint() == value && detail::sym_usable(a.value)) return a.value;
  return SymInt(value);
}

SymInt VjpContext::numel_of(size_t input) const {
  SymInt n = 1;
  for (const SymInt& s : sizes_of(input)) n = n * s;
  return n;
}

std::vector<Tensor> Op::vjp(const VjpContext&) const {
  throw Error(fmt::format("[{}] is not differentiable", name()));
}

}  // namespace kiln
