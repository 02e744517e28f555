// Dropout: the random keep mask is drawn by the public function (so the op itself is a pure,
// deterministic function of x and the mask) and applied by DropoutOp, whose gradient is the same
// op applied to the incoming gradient.
#include "kiln/ops/dropout.h"

#include <cmath>

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

// out = x * (mask ? scale : 0). Multiplying (rather than selecting 0) keeps NaN and Inf of
// dropped elements, as PyTorch's x * noise does.
class DropoutOp final : public Op {
 public:
  explicit DropoutOp(double scale) : scale_(scale) {}
  const char* name() const override { return "dropout"; }
  nlohmann::json attrs() const override { return {{"scale", scale_}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &mask = in[1];
    if (!is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input, but got {}", x.describe());
    if (mask.dtype() != DType::Bool || mask.shape() != x.shape())
      fail(name(), loc, "expected a bool mask of the input's shape {}, but got {}", x.describe(),
           mask.describe());
    return {{x.shape(), x.dtype(), x.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    visit_dtype(in[0].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const C keep = static_cast<C>(scale_);
      map_binary<T, bool, T>(in[0], in[1], out[0],
                             [keep](C v, bool m) { return v * (m ? keep : C(0)); });
    });
  }

  // Only the mask is needed: the op is linear in x.
  // The gradient reads only the mask (input 1), never x.
  Saves saves() const override { return {true, false, ~uint64_t{0}, uint64_t{2}}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    return {call_op<DropoutOp>({ctx.grads[0], ctx.inputs[1]}, Loc::current(), scale_), Tensor()};
  }

 private:
  double scale_;
};

KILN_REGISTER_OP("dropout", (OpSchema{{"x", "mask"}, {"y"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const DropoutOp>(a.f("scale"));
});

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen, const Loc& loc) {
  if (!(p >= 0.0 && p <= 1.0))
    fail("dropout", loc, "expected a probability p in [0, 1], but got p = {} for input {}", p,
         x.describe());
  if (!training || p == 0.0) return x;
  // Checked before drawing, so a bad call leaves the generator untouched.
  if (!is_floating(x.dtype()))
    fail("dropout", loc, "expected a floating-point input, but got {}", x.describe());
  if (p == 1.0)
    return call_op<DropoutOp>({x, zeros(x.shape(), {DType::Bool, x.device()}, loc)}, loc, 0.0);
  // The mask is a random op (Note [random ops]): a replay draws the same one.
  Tensor mask = bernoulli_mask(x.shape(), 1.0 - p, x.device(), gen, loc);
  return call_op<DropoutOp>({x, mask}, loc, 1.0 / (1.0 - p));
}

}  // namespace kiln
