#include "kiln/ops/composite_op.h"

#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

std::vector<Tensor> CompositeOp::forward(const std::vector<Tensor>& inputs,
                                         const std::vector<TensorMeta>& metas) const {
  std::vector<Tensor> out;
  {
    detail::CompositeScope scope;
    out = decompose(inputs);
  }
  const std::string op = name();
  KILN_INTERNAL_ASSERT(out.size() == metas.size(),
                       op + ": the decomposition's output count differs from infer's");
  for (size_t i = 0; i < out.size(); ++i) {
    KILN_INTERNAL_ASSERT(out[i].shape() == metas[i].shape && out[i].dtype() == metas[i].dtype,
                         op + ": the decomposition disagrees with infer");
    // Outputs are new tensors (the op is not a view): never an input's memory.
    for (const Tensor& t : inputs)
      KILN_INTERNAL_ASSERT(!t.defined() || t.storage() != out[i].storage(),
                           op + ": the decomposition returned an input's memory");
    // A view of a temporary (a reshape of bmm's output) is, for the caller, a new tensor.
    if (out[i].is_view()) out[i] = detail::release_view(out[i]);
  }
  return out;
}

}  // namespace kiln
