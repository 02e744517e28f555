// detach (Note [detach]): the op that aliases a tensor without its history.
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// Note [detach]: an alias of x (same storage and geometry) without x's history. It is an op so that
// every mode sees it: a tracer records where the alias comes from, and the tape never records it
// (not differentiable), which is what cuts the history. The alias is a view only if x is one.
class DetachOp final : public Op {
 public:
  const char* name() const override { return "detach"; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    TensorMeta m{in[0].shape(), in[0].dtype(), in[0].device()};
    m.strides = in[0].strides();
    m.storage_offset = in[0].storage_offset();
    m.alias_of = 0;
    return one_output(std::move(m));
  }
  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>&) const override {
    const Tensor& x = in[0];
    auto impl = std::make_shared<TensorImpl>(x.storage(), x.shape(), x.strides(),
                                             x.storage_offset(), x.dtype());
    impl->is_view_ = x.is_view();
    impl->view_history_version_ = x.storage()->history_version();  // no history to go stale
    return {Tensor(std::move(impl))};
  }
  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
  bool is_view() const override { return true; }
};

KILN_REGISTER_OP("detach", (OpSchema{{"x"}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs&) -> OpPtr { return std::make_shared<const DetachOp>(); });

}  // namespace

Tensor detach(const Tensor& x, const Loc& loc) {
  return dispatch1(std::make_shared<const DetachOp>(), {x}, loc);
}

}  // namespace kiln
