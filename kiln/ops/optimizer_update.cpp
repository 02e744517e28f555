// The optimizers' update ops (Note [optimizer updates are ops] in optimizer_update.h): one generic
// op class under four names, its inference and declared writes. The kernels (the fused loops,
// Note [optimizer parity]) are in kiln/backend/cpu/optimizer_update_ops.cpp (Note [kernel table]).
#include "kiln/ops/optimizer_update.h"

#include <cmath>

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

constexpr const char* kHyperRow = "hyper_row";

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
  // Every input but the gradient and the hyper matrix is written.
  uint64_t mutates() const override { return ~uint64_t{has_hyper() ? 6u : 2u}; }
  bool has_hyper() const { return attrs_.contains(kHyperRow); }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    if (in.size() < 2)
      fail(name(), loc, "expected a parameter and its gradient, but got {} tensors", in.size());
    const Tensor& p = in[0];
    if (!is_floating(p.dtype()))
      fail(name(), loc, "expected a floating-point parameter, but got {}", p.describe());
    if (has_hyper()) check_hyper(in, loc);
    std::vector<TensorMeta> out;
    for (size_t i = 0; i < in.size(); ++i) {
      if (i == 2 && has_hyper()) continue;
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
      if (i != 1 && !(i == 2 && has_hyper())) out.push_back(in[i]);
    kernel(in, out);
    in[0].storage()->bump_version(name_, kernel_call_site());
    return out;
  }

 private:
  // Input 2 is the float64 matrix whose row "hyper_row" holds the update's numbers.
  void check_hyper(const std::vector<Tensor>& in, const Loc& loc) const {
    const nlohmann::json& r = attrs_[kHyperRow];
    if (!r.is_number_integer() || r.get<int64_t>() < 0)
      fail(name(), loc, "expected attr {} to be an integer >= 0, but got {}", kHyperRow, r.dump());
    if (in.size() < 3)
      fail(name(), loc, "expected a hyper matrix as input 2 ({} is set), but got {} tensors",
           kHyperRow, in.size());
    const Tensor& h = in[2];
    const auto columns = static_cast<int64_t>(detail::update_hyper_values(attrs_).size());
    if (h.dtype() != DType::Float64 || h.dim() != 2 || h.shape()[0] <= r.get<int64_t>() ||
        h.shape()[1] < columns)
      fail(name(), loc,
           "expected input 2 to be a float64 matrix with a row {} of at least {} numbers, but got "
           "{}",
           r.get<int64_t>(), columns, h.describe());
  }

  const char* name_;
  nlohmann::json attrs_;
};

thread_local detail::UpdateSink* tls_sink = nullptr;

// One string per op name, so that the kernel table's per-thread cache sees one address per op.
constexpr const char* kUpdateNames[] = {"sgd_update", "adam_update", "rmsprop_update",
                                        "adagrad_update"};

template <detail::OptimizerUpdate kKind>
OpPtr make_update(const Attrs& a) {
  return std::make_shared<const UpdateOp>(kUpdateNames[static_cast<int>(kKind)], a.json());
}

#define KILN_UPDATE_SCHEMA \
  (OpSchema{{"param", "grad", "state..."}, {"param", "state..."}, AutocastPolicy::kKeep})
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

bool detail::is_update_hyper(const std::string& key, const nlohmann::json& v) {
  if (key == kHyperRow) return false;
  if (v.is_number() || v.is_boolean()) return true;
  return v.is_string() && (v == "nan" || v == "inf" || v == "-inf");
}

std::vector<double> detail::update_hyper_values(const nlohmann::json& attrs) {
  std::vector<double> values;
  for (const auto& [key, v] : attrs.items()) {
    if (!detail::is_update_hyper(key, v)) continue;
    values.push_back(v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0)
                                    : Attrs("optimizer update", attrs).f(key.c_str()));
  }
  return values;
}

const nlohmann::json& detail::resolved_update_attrs(const Op& op, const std::vector<Tensor>& inputs,
                                                    std::vector<Tensor>& loop_inputs,
                                                    nlohmann::json& storage) {
  const nlohmann::json& own = optimizer_update_attrs(op);
  loop_inputs = inputs;
  if (!own.contains(kHyperRow)) return own;
  storage = own;
  nlohmann::json& attrs = storage;
  const int64_t row = attrs[kHyperRow].get<int64_t>();
  const Tensor h = contiguous(inputs[2]);
  const double* values = static_cast<const double*>(h.raw_data()) + row * h.shape()[1];
  size_t c = 0;
  for (auto& [key, v] : attrs.items()) {
    if (!detail::is_update_hyper(key, v)) continue;
    const double x = values[c++];
    if (v.is_boolean())
      v = x != 0;
    else if (v.is_number_integer())
      v = static_cast<int64_t>(std::llround(x));
    else
      v = attr_double(x);
  }
  attrs.erase(kHyperRow);
  loop_inputs.erase(loop_inputs.begin() + 2);
  return attrs;
}

void detail::optimizer_update_from(OptimizerUpdate kind, nlohmann::json attrs,
                                   std::vector<Tensor> tensors, const Tensor& hyper, int64_t row,
                                   const Loc& loc) {
  attrs[kHyperRow] = row;
  tensors.insert(tensors.begin() + 2, hyper);
  dispatch(std::make_shared<const UpdateOp>(kUpdateNames[static_cast<int>(kind)], std::move(attrs)),
           tensors, loc);
}

detail::UpdateSinkScope::UpdateSinkScope(UpdateSink* sink) : previous_(tls_sink) {
  tls_sink = sink;
}

detail::UpdateSinkScope::~UpdateSinkScope() {
  tls_sink = previous_;
}

void detail::optimizer_update(OptimizerUpdate kind, nlohmann::json attrs,
                              const std::vector<Tensor>& tensors, const Loc& loc) {
  if (tls_sink) {
    tls_sink->take(kind, std::move(attrs), tensors);
    return;
  }
  dispatch(std::make_shared<const UpdateOp>(kUpdateNames[static_cast<int>(kind)], std::move(attrs)),
           tensors, loc);
}

}  // namespace kiln
