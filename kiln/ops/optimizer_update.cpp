// The optimizers' update ops (Note [optimizer updates are ops] in optimizer_update.h): one generic
// op class under four names, its inference and declared writes. The kernels (the fused loops,
// Note [optimizer parity]) are in kiln/backend/cpu/optimizer_update_ops.cpp (Note [kernel table]).
#include "kiln/ops/optimizer_update.h"

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

class UpdateOp final : public Op {
 public:
  UpdateOp(const char* name, nlohmann::json attrs) : name_(name), attrs_(std::move(attrs)) {
    Attrs(name_, attrs_);  // an object, or a clear error
  }
  const nlohmann::json& update_attrs() const { return attrs_; }
  const char* name() const override { return name_; }
  nlohmann::json attrs() const override { return attrs_; }
  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
  uint64_t mutates() const override { return ~uint64_t{2}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    if (in.size() < 2)
      fail(name(), loc, "expected a parameter and its gradient, but got {} tensors", in.size());
    const Tensor& p = in[0];
    if (!is_floating(p.dtype()))
      fail(name(), loc, "expected a floating-point parameter, but got {}", p.describe());
    std::vector<TensorMeta> out;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].shape() != p.shape() || in[i].dtype() != p.dtype())
        fail(name(), loc, "expected tensor {} of the parameter's shape and dtype ({}), but got {}",
             i, p.describe(), in[i].describe());
      if (i > 0 && !in[i].is_contiguous())
        fail(name(), loc, "expected a contiguous tensor {}, but got {} with strides {}", i,
             in[i].describe(), shape_str(in[i].strides()));
      if (i == 1) continue;
      TensorMeta m{in[i].shape(), in[i].dtype(), in[i].device()};
      m.strides = in[i].strides();
      m.storage_offset = in[i].storage_offset();
      m.alias_of = static_cast<int>(i);
      out.push_back(m);
    }
    return out;
  }

  // The outputs are the written inputs themselves (every one but the gradient); the kernel writes
  // them in place.
  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>&) const override {
    std::vector<Tensor> out;
    for (size_t i = 0; i < in.size(); ++i)
      if (i != 1) out.push_back(in[i]);
    kernel(in, out);
    in[0].storage()->bump_version(name_, kernel_call_site());
    return out;
  }

 private:
  const char* name_;
  nlohmann::json attrs_;
};

// One string per op name, so that the kernel table's per-thread cache sees one address per op.
constexpr const char* kUpdateNames[] = {"sgd_update", "adam_update", "rmsprop_update",
                                        "adagrad_update"};

template <detail::OptimizerUpdate kKind>
OpPtr make_update(const Attrs& a) {
  return std::make_shared<const UpdateOp>(kUpdateNames[static_cast<int>(kKind)], a.json());
}

#define KILN_UPDATE_SCHEMA (OpSchema{{"param", "grad", "state..."}, {"param", "state..."}})
KILN_REGISTER_OP(kUpdateNames[0], KILN_UPDATE_SCHEMA, make_update<detail::OptimizerUpdate::kSgd>);
KILN_REGISTER_OP(kUpdateNames[1], KILN_UPDATE_SCHEMA, make_update<detail::OptimizerUpdate::kAdam>);
KILN_REGISTER_OP(kUpdateNames[2], KILN_UPDATE_SCHEMA,
                 make_update<detail::OptimizerUpdate::kRmsprop>);
KILN_REGISTER_OP(kUpdateNames[3], KILN_UPDATE_SCHEMA,
                 make_update<detail::OptimizerUpdate::kAdagrad>);
#undef KILN_UPDATE_SCHEMA

}  // namespace

const nlohmann::json& detail::optimizer_update_attrs(const Op& op) {
  const auto* u = dynamic_cast<const UpdateOp*>(&op);
  KILN_INTERNAL_ASSERT(u != nullptr,
                       std::string("optimizer_update_attrs of op '") + op.name() + "'");
  return u->update_attrs();
}

void detail::optimizer_update(OptimizerUpdate kind, nlohmann::json attrs,
                              const std::vector<Tensor>& tensors, const Loc& loc) {
  dispatch(std::make_shared<const UpdateOp>(kUpdateNames[static_cast<int>(kind)], std::move(attrs)),
           tensors, loc);
}

}  // namespace kiln
