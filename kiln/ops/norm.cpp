// batch_norm, layer_norm and group_norm: one fused NormOp (statistics and affine transform in two
// passes over x), whose vjp is written with public ops, plus the unfused reference decompositions
// that tests compare it with.
#include "kiln/ops/norm.h"

#include <cmath>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm_ops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

using detail::make_norm_geom;
using detail::norm_kind_name;
using detail::NormAttrs;
using detail::NormGeom;
using detail::NormKind;

// Outputs: y (x's shape), and the mean and biased variance of every statistic (stat_shape).
// The statistics are outputs so that batch_norm can update running statistics without another
// pass, and so that the vjp need not recompute them.
class NormOp final : public Op {
 public:
  NormOp(NormKind kind, int64_t groups_or_k, double eps, bool has_weight, bool has_bias)
      : a_{kind, groups_or_k, eps, has_weight, has_bias} {}
  const NormAttrs& norm_attrs() const { return a_; }
  const char* name() const override { return norm_kind_name(a_.kind); }
  bool memory_bound() const override { return true; }  // Note [rematerialization]
  nlohmann::json attrs() const override {
    nlohmann::json j = {
        {"eps", attr_double(a_.eps)}, {"has_weight", a_.has_weight}, {"has_bias", a_.has_bias}};
    if (a_.kind == NormKind::kGroup) j["num_groups"] = a_.groups_or_k;
    if (a_.kind == NormKind::kLayer) j["normalized_rank"] = a_.groups_or_k;
    return j;
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    if (!is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input, but got {}", x.describe());
    NormGeom g = make_norm_geom(a_.kind, x.shape(), a_.groups_or_k);
    Shape pshape = a_.kind == NormKind::kLayer
                       ? Shape(x.shape().end() - a_.groups_or_k, x.shape().end())
                       : Shape{x.dim_size(1)};
    for (size_t i = 1; i < in.size(); ++i) {
      const char* what = i == 1 && a_.has_weight ? "weight" : "bias";
      if (in[i].shape() != pshape || in[i].dtype() != x.dtype())
        fail(name(), loc, "expected {} of shape {} and dtype {} (for input {}), but got {}", what,
             shape_str(pshape), dtype_name(x.dtype()), x.describe(), in[i].describe());
    }
    // batch_norm keeps a channels-last float32 input's layout (Note [channels-last training]
    // in kiln/backend/onednn/conv_primitives.h); the kernel reads it as rows of channels.
    const bool last = a_.kind == NormKind::kBatch && detail::batch_norm_keeps_channels_last(x);
    return {{x.shape(), x.dtype(), x.device(),
             last ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous},
            {g.stat_shape, x.dtype(), x.device()},
            {g.stat_shape, x.dtype(), x.device()}};
  }

  // The vjp reads the statistics, never y (which the next op usually saves itself).
  Saves saves() const override { return {true, true, ~uint64_t{1}}; }
  // x always; the weight only for x's gradient; the bias never (its gradient is a sum of g).
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    Saves s = saves();
    s.input_mask = 1u | (a_.has_weight && needs_grad[0] ? 2u : 0u);
    return s;
  }

  // With xhat = (x - mean) * rstd and gxhat = g * weight, the gradient through the statistics is
  //   gx = rstd * (gxhat - mean_R(gxhat) - xhat * mean_R(gxhat * xhat))
  // plus the gradients that reach the mean / var outputs themselves (they do in higher-order
  // gradients, where this vjp's use of them is differentiated): d mean / dx = 1 / n and
  // d var / dx = 2 (x - mean) / n = 2 xhat / (n rstd). Both extra terms are folded into the
  // per-statistic coefficients c0, c1 of gx = rstd * gxhat + c0 + c1 * xhat, so they cost no
  // extra pass over x.
  //
  // batch_norm's first-order gradient is one fused op (batch_norm_backward, two passes over x);
  // only when a graph of the gradient is being built (create_graph) does it take the
  // differentiable decomposition below.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const Tensor w = a_.has_weight ? ctx.inputs[1] : Tensor();
    if (a_.kind == NormKind::kBatch && !ctx.create_graph) {
      std::vector<Tensor> g = batch_norm_backward(ctx.grads[0], x, ctx.outputs[1], ctx.outputs[2],
                                                  w, a_.eps, ctx.grads[1], ctx.grads[2]);
      std::vector<Tensor> grads{g[0]};
      if (a_.has_weight) grads.push_back(g[1]);
      if (a_.has_bias) grads.push_back(g[2]);
      for (size_t i = 0; i < grads.size(); ++i)
        if (!ctx.needs_grad[i]) grads[i] = Tensor();
      return grads;
    }
    NormGeom g = make_norm_geom(a_.kind, x.shape(), a_.groups_or_k);
    // The views' leading dim is the batch (or the rows of a layer norm): -1, so that a traced
    // backward is sized by each call (Note [size-free backward]), and so is batch_norm's count
    // n = N*H*W (the elements per channel; layer and group norm count within a sample).
    if (g.p != 0) {
      g.view[0] = -1;
      if (a_.kind != NormKind::kBatch) g.stat_view[0] = -1;
    }
    const SymInt n =
        a_.kind == NormKind::kBatch && g.q != 0 ? ctx.numel_of(0) / g.q : SymInt(g.count);
    Tensor xv = reshape(x, g.view), gy = reshape(ctx.grads[0], g.view);
    Tensor mean_v = reshape(ctx.outputs[1], g.stat_view);
    Tensor rstd = rsqrt(add(reshape(ctx.outputs[2], g.stat_view), a_.eps));
    Tensor xhat = mul(sub(xv, mean_v), rstd);
    std::vector<Tensor> grads(ctx.inputs.size());
    if (ctx.needs_grad[0]) {
      Tensor gxhat = a_.has_weight ? mul(gy, reshape(w, g.param_view)) : gy;
      Tensor a = mean(gxhat, g.reduce, true), b = mean(mul(gxhat, xhat), g.reduce, true);
      Tensor c0 = add(neg(mul(rstd, a)), div(reshape(ctx.grads[1], g.stat_view), n));
      Tensor c1 =
          sub(div(div(mul(reshape(ctx.grads[2], g.stat_view), 2.0), n), rstd), mul(rstd, b));
      grads[0] = reshape(add(mul(gxhat, rstd), add(c0, mul(c1, xhat))), ctx.sizes_of(0));
    }
    const size_t bias_index = a_.has_weight ? 2 : 1;
    if (a_.has_weight && ctx.needs_grad[1])
      grads[1] = reshape(sum_to(mul(gy, xhat), g.param_view), ctx.input_metas[1].shape);
    if (a_.has_bias && ctx.needs_grad[bias_index])
      grads[bias_index] = reshape(sum_to(gy, g.param_view), ctx.input_metas[bias_index].shape);
    return grads;
  }

 private:
  NormAttrs a_;
};

template <NormKind kKind>
OpPtr make_norm(const Attrs& a) {
  const int64_t k = kKind == NormKind::kGroup   ? a.i("num_groups")
                    : kKind == NormKind::kLayer ? a.i("normalized_rank")
                                                : 0;
  return std::make_shared<const NormOp>(kKind, k, a.f("eps"), a.b("has_weight"), a.b("has_bias"));
}
KILN_REGISTER_OP(
    "batch_norm",
    (OpSchema{{"input", "weight?", "bias?"}, {"output", "mean", "var"}, AutocastPolicy::kFloat32}),
    make_norm<NormKind::kBatch>);
KILN_REGISTER_OP(
    "layer_norm",
    (OpSchema{{"input", "weight?", "bias?"}, {"output", "mean", "var"}, AutocastPolicy::kFloat32}),
    make_norm<NormKind::kLayer>);
KILN_REGISTER_OP(
    "group_norm",
    (OpSchema{{"input", "weight?", "bias?"}, {"output", "mean", "var"}, AutocastPolicy::kFloat32}),
    make_norm<NormKind::kGroup>);

}  // namespace

bool detail::batch_norm_keeps_channels_last(const Tensor& x) {
  return x.dim() == 4 && x.dtype() == DType::Float32 && x.is_channels_last();
}

const detail::NormAttrs& detail::norm_attrs(const Op& op) {
  const auto* n = dynamic_cast<const NormOp*>(&op);
  KILN_INTERNAL_ASSERT(n != nullptr, std::string("norm_attrs of op '") + op.name() + "'");
  return n->norm_attrs();
}

namespace {

std::vector<Tensor> run_norm(NormKind kind, const Tensor& x, int64_t groups_or_k,
                             const Tensor& weight, const Tensor& bias, double eps, const Loc& loc) {
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  return dispatch(
      std::make_shared<const NormOp>(kind, groups_or_k, eps, weight.defined(), bias.defined()),
      inputs, loc);
}

void check_channels_input(const char* op, const Tensor& x, const Loc& loc) {
  if (x.dim() < 2)
    fail(op, loc, "expected an input of rank >= 2 (N, C, ...), but got {}", x.describe());
  if (!is_floating(x.dtype()))
    fail(op, loc, "expected a floating-point input, but got {}", x.describe());
}

void check_running_stat(const char* what, const Tensor& t, const Tensor& x, const Loc& loc) {
  if (!t.defined()) return;
  if (t.shape() != Shape{x.dim_size(1)} || !is_floating(t.dtype()))
    fail("batch_norm", loc,
         "expected {} of shape [{}] with a floating dtype (one per channel of input {}), but got "
         "{}",
         what, x.dim_size(1), x.describe(), t.describe());
  // Running statistics are buffers: PyTorch refuses them as differentiable inputs in both modes,
  // and training would update a tensor that requires grad in place.
  if (GradMode::is_enabled() && t.requires_grad())
    fail("batch_norm", loc,
         "expected {} that does not require grad (running statistics are buffers, not "
         "differentiable inputs), but got {} that requires grad",
         what, t.describe());
}

// Shape [1, C, 1, ...] of x's rank, so a per-channel [C] tensor broadcasts over x.
Shape channel_view(const Tensor& x) {
  Shape s(x.dim(), 1);
  s[1] = x.dim_size(1);
  return s;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps, const Loc& loc) {
  check_channels_input("batch_norm", x, loc);
  check_running_stat("running_mean", running_mean, x, loc);
  check_running_stat("running_var", running_var, x, loc);
  const int64_t per_channel = x.dim_size(1) == 0 ? 0 : x.numel() / x.dim_size(1);
  if (training) {
    if (per_channel == 1)
      fail("batch_norm", loc,
           "expected more than 1 value per channel when training, but got input {}", x.describe());
    std::vector<Tensor> out = run_norm(NormKind::kBatch, x, 0, weight, bias, eps, loc);
    // An empty batch (N = 0) gives an empty output and leaves the running statistics as they
    // were, as in PyTorch.
    if (per_channel == 0) return out[0];
    // One op per statistic, reading n from x (Note [running statistics]).
    NoGradGuard no_grad;
    if (running_mean.defined())
      detail::running_stat_update(running_mean, to_dtype(out[1], running_mean.dtype(), loc), x,
                                  momentum, false, loc);
    if (running_var.defined())
      detail::running_stat_update(running_var, to_dtype(out[2], running_var.dtype(), loc), x,
                                  momentum, true, loc);
    return out[0];
  }
  if (!running_mean.defined() || !running_var.defined())
    fail("batch_norm", loc,
         "expected running_mean and running_var in evaluation mode (training=false), but got "
         "{} and {} for input {}",
         running_mean.defined() ? running_mean.describe() : "undefined",
         running_var.defined() ? running_var.describe() : "undefined", x.describe());
  // Inside an autocast region the op casts x and the parameters to one dtype first (Note
  // [autocast]); batch_norm_eval's infer checks the dtypes it then gets.
  const bool same_dtype_needed = !autocast_dtype().has_value();
  for (const Tensor* p : {&weight, &bias})
    if (p->defined() &&
        (p->shape() != Shape{x.dim_size(1)} || (same_dtype_needed && p->dtype() != x.dtype())))
      fail("batch_norm", loc, "expected {} of shape [{}] and dtype {} (for input {}), but got {}",
           p == &weight ? "weight" : "bias", x.dim_size(1), dtype_name(x.dtype()), x.describe(),
           p->describe());
  // Evaluation is an affine map per channel, y = x * scale + shift, as PyTorch computes it: one
  // op (batch_norm_eval.cpp) that a tracer and an exporter see as batch norm.
  return detail::batch_norm_eval(x, running_mean, running_var, weight, bias, eps, loc);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps, const Loc& loc) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (k == 0 || k > x.dim() ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - k))
    fail("layer_norm", loc,
         "expected a non-empty normalized_shape equal to the trailing sizes of the input, but "
         "got normalized_shape {} for input {}",
         shape_str(normalized_shape), x.describe());
  return run_norm(NormKind::kLayer, x, k, weight, bias, eps, loc)[0];
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps, const Loc& loc) {
  check_channels_input("group_norm", x, loc);
  if (num_groups <= 0 || x.dim_size(1) % num_groups != 0)
    fail("group_norm", loc,
         "expected num_groups > 0 dividing the number of channels, but got num_groups {} for "
         "input {}",
         num_groups, x.describe());
  return run_norm(NormKind::kGroup, x, num_groups, weight, bias, eps, loc)[0];
}

namespace reference {

namespace {
Tensor normalize(const Tensor& x, const Dims& dims, double eps, const Loc& loc) {
  Tensor m = mean(x, dims, true, loc);
  Tensor v = var(x, dims, 0, true, loc);
  return mul(sub(x, m, loc), rsqrt(add(v, eps, loc), loc), loc);
}
Tensor affine(Tensor y, const Tensor& weight, const Tensor& bias, const Shape& view,
              const Loc& loc) {
  if (weight.defined()) y = mul(y, reshape(weight, view, loc), loc);
  if (bias.defined()) y = add(y, reshape(bias, view, loc), loc);
  return y;
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double eps,
                  const Loc& loc) {
  const Shape cv = channel_view(x);
  Tensor y;
  if (training) {
    Dims dims{0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    y = normalize(x, dims, eps, loc);
  } else {
    y = mul(sub(x, reshape(running_mean, cv, loc), loc),
            reshape(rsqrt(add(running_var, eps, loc), loc), cv, loc), loc);
  }
  return affine(y, weight, bias, cv, loc);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps, const Loc& loc) {
  Dims dims;
  for (size_t i = 0; i < normalized_shape.size(); ++i)
    dims.push_back(x.dim() - 1 - static_cast<int64_t>(i));
  return affine(normalize(x, dims, eps, loc), weight, bias, normalized_shape, loc);
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps, const Loc& loc) {
  Tensor y = normalize(reshape(x, {x.size(0), num_groups, -1}, loc), {2}, eps, loc);
  return affine(reshape(y, x.sizes(), loc), weight, bias, channel_view(x), loc);
}

}  // namespace reference

}  // namespace kiln
