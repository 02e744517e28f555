// Fused softmax and log_softmax along one dim (the kernel is in kiln/backend/cpu/softmax_ops.cpp,
// Note [kernel table]), plus their unfused reference decompositions (softmax_ops.h) that tests
// compare the fused kernel against.
#include "kiln/ops/softmax.h"

#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

// Both ops, so that softmax_attrs() takes one cast.
class SoftmaxBaseOp : public Op {
 public:
  explicit SoftmaxBaseOp(int64_t dim) : a_{dim} {}
  const detail::SoftmaxAttrs& softmax_attrs() const { return a_; }

 protected:
  detail::SoftmaxAttrs a_;
};

template <bool kLog>
class SoftmaxOp final : public SoftmaxBaseOp {
 public:
  explicit SoftmaxOp(int64_t dim) : SoftmaxBaseOp(dim) {}
  const char* name() const override { return kLog ? "log_softmax" : "softmax"; }
  nlohmann::json attrs() const override { return {{"dim", a_.dim}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    if (!is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input, but got {}", x.describe());
    wrap_dim(a_.dim, x.dim(), name(), loc);
    return {{x.shape(), x.dtype(), x.device()}};
  }

  Saves saves() const override { return {false, true}; }

  // softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g), sums along dim.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Tensor& y = ctx.outputs[0];
    const Tensor& g = ctx.grads[0];
    const Dims dims{wrap_dim(a_.dim, y.dim(), name())};
    if constexpr (kLog) return {sub(g, mul(exp(y), sum(g, dims, true)))};
    return {mul(y, sub(g, sum(mul(g, y), dims, true)))};
  }
};

template <bool kLog>
OpPtr make_softmax(const Attrs& a) {
  return std::make_shared<const SoftmaxOp<kLog>>(a.i("dim"));
}
KILN_REGISTER_OP("softmax", (OpSchema{{"x"}, {"y"}, AutocastPolicy::kFloat32}),
                 make_softmax<false>);
KILN_REGISTER_OP("log_softmax", (OpSchema{{"x"}, {"y"}, AutocastPolicy::kFloat32}),
                 make_softmax<true>);

}  // namespace

const detail::SoftmaxAttrs& detail::softmax_attrs(const Op& op) {
  const auto* o = dynamic_cast<const SoftmaxBaseOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("softmax_attrs of op '") + op.name() + "'");
  return o->softmax_attrs();
}

Tensor softmax(const Tensor& x, int64_t dim, const Loc& loc) {
  return call_op<SoftmaxOp<false>>({x}, loc, dim);
}

Tensor log_softmax(const Tensor& x, int64_t dim, const Loc& loc) {
  return call_op<SoftmaxOp<true>>({x}, loc, dim);
}

namespace reference {

Tensor softmax(const Tensor& x, int64_t dim, const Loc& loc) {
  return exp(sub(x, logsumexp(x, {dim}, true, loc), loc), loc);
}

Tensor log_softmax(const Tensor& x, int64_t dim, const Loc& loc) {
  return sub(x, logsumexp(x, {dim}, true, loc), loc);
}

}  // namespace reference

}  // namespace kiln
