// Assignment ops: copy_ and fill_ write into their first input (Note [effects]). Tensor::copy_,
// fill_, zero_ and every in-place arithmetic op (add_, mul_, ...) end in one of these, so a mode
// that sees the op stream sees every write; batch norm's running statistics and the layers'
// initializers go through them too. Definitions only (infer, effects); the kernels, which write
// the memory, are in kiln/backend/cpu/assign_ops.cpp (Note [kernel table]).
#include "kiln/ops/assign.h"

#include "kiln/ops/assign_ops.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// The output is the written input itself (declared by alias_of and mutates()).
TensorMeta written(const Tensor& self) {
  TensorMeta m{self.shape(), self.dtype(), self.device()};
  m.strides = self.strides();
  m.storage_offset = self.storage_offset();
  m.alias_of = 0;
  return m;
}

class AssignOp : public Op {
 public:
  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
  uint64_t mutates() const override { return 1; }
  // Nothing to allocate: the kernel (found in the kernel table) writes into self.
  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>&) const override {
    kernel(in, {in[0]});
    return {in[0]};
  }
};

// self <- src, converting the dtype; src has self's shape or is zero-dim.
class CopyOp final : public AssignOp {
 public:
  const char* name() const override { return "copy_"; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &self = in[0], &src = in[1];
    if (src.dim() != 0 && src.shape() != self.shape())
      fail(name(), loc, "expected a source of the destination's shape {} (or zero-dim), but got {}",
           shape_str(self.shape()), src.describe());
    return {written(self)};
  }
};

class FillOp final : public AssignOp {
 public:
  explicit FillOp(double value) : a_{value} {}
  const char* name() const override { return "fill_"; }
  nlohmann::json attrs() const override { return {{"value", attr_double(a_.value)}}; }
  const detail::FillAttrs& fill_attrs() const { return a_; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    return {written(in[0])};
  }

 private:
  detail::FillAttrs a_;
};

KILN_REGISTER_OP("copy_", (OpSchema{{"self", "src"}, {"self"}, AutocastPolicy::kKeep}),
                 no_attrs<CopyOp>());
KILN_REGISTER_OP("fill_", (OpSchema{{"self"}, {"self"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const FillOp>(a.f("value"));
                 });

}  // namespace

const detail::FillAttrs& detail::fill_attrs(const Op& op) {
  const auto* o = dynamic_cast<const FillOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("fill_attrs of op '") + op.name() + "'");
  return o->fill_attrs();
}

void assign(const Tensor& self, const Tensor& src, const Loc& loc) {
  static const OpPtr op = std::make_shared<const CopyOp>();
  dispatch(op, {self, src}, loc);
}

void assign_fill(const Tensor& self, double value, const Loc& loc) {
  dispatch(std::make_shared<const FillOp>(value), {self}, loc);
}

}  // namespace kiln
