// conv_bn_fold (Note [conv-bn fold] in conv_bn_fold.h): the op and its gradient in public ops.
// Its kernel on [C] vectors is in kiln/backend/cpu/conv_bn_fold.cpp (Note [kernel table]).
#include "kiln/ops/conv_bn_fold.h"

#include <string>

#include "kiln/ops/binary.h"
#include "kiln/ops/conv_ops.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

// Inputs: running_mean, running_var, then weight, bias and conv_bias where present (the has_*
// attributes say which).
class ConvBnFoldOp final : public Op {
 public:
  ConvBnFoldOp(double eps, bool has_weight, bool has_bias, bool has_conv_bias)
      : a_{eps, has_weight, has_bias, has_conv_bias} {}
  const detail::ConvBnFoldAttrs& conv_bn_fold_attrs() const { return a_; }
  const char* name() const override { return "conv_bn_fold"; }
  nlohmann::json attrs() const override {
    return {{"eps", attr_double(a_.eps)},
            {"has_weight", a_.has_weight},
            {"has_bias", a_.has_bias},
            {"has_conv_bias", a_.has_conv_bias}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const size_t expected =
        2 + (a_.has_weight ? 1 : 0) + (a_.has_bias ? 1 : 0) + (a_.has_conv_bias ? 1 : 0);
    if (in.size() != expected)
      fail(name(), loc,
           "expected {} inputs (has_weight {}, has_bias {}, has_conv_bias {}), but got {}",
           expected, a_.has_weight, a_.has_bias, a_.has_conv_bias, in.size());
    const Tensor& mean = in[0];
    if (mean.dim() != 1 || !is_floating(mean.dtype()))
      fail(name(), loc, "expected a floating-point running_mean of shape [C], but got {}",
           mean.describe());
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].shape() != mean.shape() || in[i].dtype() != mean.dtype() ||
          in[i].device() != mean.device())
        fail(name(), loc,
             "expected {} of shape [{}], dtype {} and device {} (running_mean's), but got {}",
             input_name(i), mean.dim_size(0), dtype_name(mean.dtype()), mean.device().name(),
             in[i].describe());
    const TensorMeta m{mean.shape(), mean.dtype(), mean.device()};
    return {m, m};
  }

  // With inv = 1 / sqrt(var + eps) and d = conv_bias - mean, scale = weight * inv and
  // shift = bias + d * scale; g_scale is scale's whole gradient, its own plus shift's through d.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &mean = ctx.inputs[0], &var = ctx.inputs[1];
    const Tensor &gs = ctx.grads[0], &gh = ctx.grads[1];
    int next = 2;
    const int iw = a_.has_weight ? next++ : -1, ib = a_.has_bias ? next++ : -1;
    const int icb = a_.has_conv_bias ? next++ : -1;
    std::vector<Tensor> grads(ctx.inputs.size());
    const Tensor inv = rsqrt(add(var, a_.eps, ctx.loc), ctx.loc);
    const Tensor scale = iw >= 0 ? mul(ctx.inputs[iw], inv, ctx.loc) : inv;
    const Tensor d = icb >= 0 ? sub(ctx.inputs[icb], mean, ctx.loc) : neg(mean, ctx.loc);
    const Tensor g_scale = add(gs, mul(gh, d, ctx.loc), ctx.loc);
    if (ctx.needs_grad[0]) grads[0] = neg(mul(gh, scale, ctx.loc), ctx.loc);
    if (ctx.needs_grad[1])
      grads[1] =
          mul(mul(g_scale, scale, ctx.loc), mul(mul(inv, inv, ctx.loc), -0.5, ctx.loc), ctx.loc);
    if (iw >= 0 && ctx.needs_grad[iw]) grads[iw] = mul(g_scale, inv, ctx.loc);
    if (ib >= 0 && ctx.needs_grad[ib]) grads[ib] = gh;
    if (icb >= 0 && ctx.needs_grad[icb]) grads[icb] = mul(gh, scale, ctx.loc);
    return grads;
  }

 private:
  std::string input_name(size_t i) const {
    if (i == 1) return "running_var";
    size_t next = 2;
    for (auto [has, name] : {std::pair{a_.has_weight, "weight"}, std::pair{a_.has_bias, "bias"},
                             std::pair{a_.has_conv_bias, "conv_bias"}})
      if (has && next++ == i) return name;
    return "input " + std::to_string(i);
  }

  detail::ConvBnFoldAttrs a_;
};

KILN_REGISTER_OP("conv_bn_fold",
                 (OpSchema{{"running_mean", "running_var", "weight?", "bias?", "conv_bias?"},
                           {"scale", "shift"},
                           AutocastPolicy::kFloat32}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const ConvBnFoldOp>(
                       a.f("eps"), a.b("has_weight"), a.b("has_bias"), a.b("has_conv_bias"));
                 });

}  // namespace

const detail::ConvBnFoldAttrs& detail::conv_bn_fold_attrs(const Op& op) {
  const auto* c = dynamic_cast<const ConvBnFoldOp*>(&op);
  KILN_INTERNAL_ASSERT(c != nullptr, std::string("conv_bn_fold_attrs of op '") + op.name() + "'");
  return c->conv_bn_fold_attrs();
}

std::pair<Tensor, Tensor> conv_bn_fold(const Tensor& running_mean, const Tensor& running_var,
                                       const Tensor& weight, const Tensor& bias,
                                       const Tensor& conv_bias, double eps, const Loc& loc) {
  if (!running_mean.defined() || !running_var.defined())
    fail("conv_bn_fold", loc, "expected running_mean and running_var, but got {} and {}",
         running_mean.defined() ? running_mean.describe() : "undefined",
         running_var.defined() ? running_var.describe() : "undefined");
  std::vector<Tensor> in{running_mean, running_var};
  for (const Tensor* t : {&weight, &bias, &conv_bias})
    if (t->defined()) in.push_back(*t);
  std::vector<Tensor> out =
      dispatch(std::make_shared<const ConvBnFoldOp>(eps, weight.defined(), bias.defined(),
                                                    conv_bias.defined()),
               in, loc);
  return {out[0], out[1]};
}

}  // namespace kiln
