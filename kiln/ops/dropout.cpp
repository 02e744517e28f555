// Dropout: the random keep mask is drawn by the public function (so the op itself is a pure,
// deterministic function of x and the mask) and applied by DropoutOp, whose gradient is the same
// op applied to the incoming gradient. DropoutOp's CPU kernel is in
// kiln/backend/cpu/dropout_ops.cpp (Note [kernel table]).
#include "kiln/ops/dropout.h"

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/dropout_ops.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

// out = x * (mask ? scale : 0). Multiplying (rather than selecting 0) keeps NaN and Inf of
// dropped elements, as PyTorch's x * noise does.
class DropoutOp final : public Op {
 public:
  explicit DropoutOp(double scale) : a_{scale} {}
  const detail::DropoutAttrs& dropout_attrs() const { return a_; }
  const char* name() const override { return "dropout"; }
  nlohmann::json attrs() const override { return {{"scale", a_.scale}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &mask = in[1];
    if (!is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input, but got {}", x.describe());
    if (mask.dtype() != DType::Bool || mask.shape() != x.shape())
      fail(name(), loc, "expected a bool mask of the input's shape {}, but got {}", x.describe(),
           mask.describe());
    return {{x.shape(), x.dtype(), x.device()}};
  }

  // Only the mask is needed: the op is linear in x.
  // The gradient reads only the mask (input 1), never x.
  Saves saves() const override { return {true, false, ~uint64_t{0}, uint64_t{2}}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    return {call_op<DropoutOp>({ctx.grads[0], ctx.inputs[1]}, Loc::current(), a_.scale), Tensor()};
  }

 private:
  detail::DropoutAttrs a_;
};

KILN_REGISTER_OP("dropout", (OpSchema{{"x", "mask"}, {"y"}, AutocastPolicy::kPromote}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const DropoutOp>(a.f("scale"));
                 });

}  // namespace

const detail::DropoutAttrs& detail::dropout_attrs(const Op& op) {
  const auto* d = dynamic_cast<const DropoutOp*>(&op);
  KILN_INTERNAL_ASSERT(d != nullptr, std::string("dropout_attrs of op '") + op.name() + "'");
  return d->dropout_attrs();
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen, const Loc& loc) {
  if (!(p >= 0.0 && p <= 1.0))
    fail("dropout", loc, "expected a probability p in [0, 1], but got p = {} for input {}", p,
         x.describe());
  if (!training || p == 0.0) return x;
  // Checked before drawing, so a bad call leaves the generator untouched.
  if (!is_floating(x.dtype()))
    fail("dropout", loc, "expected a floating-point input, but got {}", x.describe());
  if (p == 1.0) return call_op<DropoutOp>({x, zeros_like(x, DType::Bool)}, loc, 0.0);
  // The mask is a random op (Note [random ops]): a replay draws the same one.
  // Its shape is x's, not an attr, so a traced dropout runs for any batch size (Note [like
  // factories]).
  Tensor mask = bernoulli_mask_like(x, 1.0 - p, gen, loc);
  return call_op<DropoutOp>({x, mask}, loc, 1.0 / (1.0 - p));
}

}  // namespace kiln
