#pragma once
// The base of the factory ops (full, arange, linspace, eye, rand, randn, randint, bernoulli):
// ops without tensor inputs whose attrs hold the output's shape, dtype, device and layout
// (Note [effects] in op.h: a mode that sees the op stream sees every tensor a program makes).
#include <nlohmann/json.hpp>

#include "kiln/ops/op.h"
#include "kiln/ops/op_factory.h"

namespace kiln::detail {

// Note [like factories]: zeros_like(x), rand_like(x), dropout's mask take their shape from an
// input, not from an attr (`like`): a traced graph holds no size, so the op runs for every size
// of a symbolic dim (Note [symbolic dims]). Such an op has one input, read for its shape only.
struct FactorySpec {
  Shape shape;            // the output's shape; unused (and not an attr) when `like`
  TensorOptions options;  // requires_grad is not part of the op: the caller sets it on the result
  bool like = false;      // the shape is the input's (Note [like factories])

  nlohmann::json json() const;
  static FactorySpec from_json(const Attrs& a);
};

class FactoryOp : public Op {
 public:
  explicit FactoryOp(FactorySpec spec) : spec_(std::move(spec)) {}
  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
  nlohmann::json attrs() const override;
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override;
  // The attributes beyond the spec.
  virtual nlohmann::json extra_attrs() const { return nlohmann::json::object(); }

 protected:
  FactorySpec spec_;
};

// Dispatches a factory op and marks the result as a leaf that requires grad when asked. Size
// errors and running out of memory name `fn`, the function the user called (zeros, ones_like).
// A `like` spec takes its shape from `like`, the op's one input.
Tensor run_factory(const char* fn, const FactorySpec& spec, const OpPtr& op, const Loc& loc,
                   const Tensor& like = Tensor());

}  // namespace kiln::detail
