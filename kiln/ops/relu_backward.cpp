// relu_backward: relu's gradient as one op, grad where x > 0 and 0 elsewhere, in one pass (the
// composition mul(grad, to_dtype(gt(x, 0))) makes three passes and two temporaries). It selects
// rather than multiplies, as PyTorch's threshold_backward does: an infinite or NaN grad where x <=
// 0 gives 0, and a NaN x passes grad through (NaN <= 0 is false). The kernel is in
// kiln/backend/cpu/relu_backward.cpp (Note [kernel table]).
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

class ReluBackwardOp final : public Op {
 public:
  const char* name() const override { return "relu_backward"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &g = in[0], &x = in[1];
    if (!is_floating(g.dtype()))
      fail(name(), loc, "expected a floating-point grad, but got {}", g.describe());
    if (x.shape() != g.shape() || x.dtype() != g.dtype() || x.device() != g.device())
      fail(name(), loc, "expected input of the grad's shape, dtype and device ({}), but got {}",
           g.describe(), x.describe());
    // The gradient of x has x's layout (Note [channels-last]): a gradient arriving in the other
    // layout (a pooling's, at a channels-last chain's end) is laid out like x here, once, rather
    // than making every gradient of the residual stream behind it NCHW, each added to a
    // channels-last one in a mixed-layout add.
    return {{g.shape(), g.dtype(), g.device(),
             x.is_channels_last() ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous}};
  }
  uint64_t may_overwrite() const override { return 3; }  // Note [in-place computation]

  // Linear in grad (its own transpose); the mask is piecewise constant in x, so x gets zeros.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    std::vector<Tensor> grads(2);
    if (ctx.needs_grad[0]) grads[0] = relu_backward(ctx.grads[0], ctx.inputs[1]);
    if (ctx.needs_grad[1]) grads[1] = zeros_like(ctx.inputs[1]);
    return grads;
  }
};

KILN_REGISTER_OP("relu_backward",
                 (OpSchema{{"grad_output", "input"}, {"grad_input"}, AutocastPolicy::kKeep}),
                 no_attrs<ReluBackwardOp>());

}  // namespace

Tensor relu_backward(const Tensor& grad, const Tensor& x, const Loc& loc) {
  static const OpPtr op = std::make_shared<const ReluBackwardOp>();
  return dispatch1(op, {grad, x}, loc);
}

}  // namespace kiln
