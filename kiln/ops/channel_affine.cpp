// channel_affine: y = x * scale[c] + shift[c] over the channel dim of x [N, C, ...], in one pass.
// batch_norm's evaluation mode is this op with scale and shift folded from the running
// statistics; its composition mul + add made two passes and a temporary of x's size. The kernel
// is in kiln/backend/cpu/norm_ops.cpp (Note [kernel table]).
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/elementwise_layout.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// [1, C, 1, ...] of x's rank: how a [C] tensor broadcasts against x.
Shape channel_shape(const Shape& x) {
  Shape s(x.size(), 1);
  s[1] = x[1];
  return s;
}

class ChannelAffineOp final : public Op {
 public:
  const char* name() const override { return "channel_affine"; }
  bool memory_bound() const override { return true; }  // Note [rematerialization]

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    if (x.dim() < 2 || !is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input of rank >= 2 (N, C, ...), but got {}",
           x.describe());
    for (size_t i = 1; i < 3; ++i)
      if (in[i].shape() != Shape{x.dim_size(1)} || in[i].dtype() != x.dtype() ||
          in[i].device() != x.device())
        fail(name(), loc, "expected {} of shape [{}] and dtype {} (for input {}), but got {}",
             i == 1 ? "scale" : "shift", x.dim_size(1), dtype_name(x.dtype()), x.describe(),
             in[i].describe());
    return {{x.shape(), x.dtype(), x.device(), elementwise_format({x}, x.shape())}};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &x = ctx.inputs[0], &scale = ctx.inputs[1], &g = ctx.grads[0];
    const Shape cs = channel_shape(ctx.input_metas[0].shape);
    const Shape c{ctx.input_metas[1].shape};
    std::vector<Tensor> grads(3);
    if (ctx.needs_grad[0]) grads[0] = mul(g, reshape(scale, cs));
    if (ctx.needs_grad[1]) grads[1] = reshape(sum_to(mul(g, x), cs), c);
    if (ctx.needs_grad[2]) grads[2] = reshape(sum_to(g, cs), c);
    return grads;
  }
};

KILN_REGISTER_OP("channel_affine",
                 (OpSchema{{"x", "scale", "shift"}, {"y"}, AutocastPolicy::kPromote}),
                 no_attrs<ChannelAffineOp>());

}  // namespace

Tensor channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift, const Loc& loc) {
  static const OpPtr op = std::make_shared<const ChannelAffineOp>();
  return dispatch1(op, {x, scale, shift}, loc);
}

}  // namespace kiln
