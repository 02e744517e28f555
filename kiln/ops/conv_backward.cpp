// The two gradients of conv2d as ops of their own: conv2d_backward_input (also the definition of
// conv_transpose2d) and conv2d_backward_weight. Their kernels are in
// kiln/backend/onednn/conv_ops.cpp (Note [kernel table]).
//
// Note [conv gradients]: with y = conv2d(x, w), the three ops are the three ways of contracting
// one bilinear form <g, conv2d(x, w)> = <conv2d_backward_input(g, w), x>
// = <conv2d_backward_weight(x, g), w>. So the vjp of each op is made of the other two (with the
// same stride, padding, dilation and groups), and gradients of every order close over this family.
#include <fmt/format.h>

#include "kiln/ops/conv.h"
#include "kiln/ops/conv_ops.h"
#include "kiln/ops/dispatcher.h"

namespace kiln {

namespace {

using detail::ConvGeometry;
using detail::short_desc;

// grad must have the spatial size that conv2d gives for geometry g.
void check_grad_size(const char* op, const Tensor& grad, const ConvGeometry& g,
                     const std::string& operands, const Loc& loc) {
  if (grad.dim_size(-2) != g.oh || grad.dim_size(-1) != g.ow)
    fail(op, loc,
         "expected grad of spatial size {}x{} (the conv2d output for input size {}x{} and kernel "
         "{}x{}), but got grad {} ({})",
         g.oh, g.ow, g.h, g.w, g.kh, g.kw, short_desc(grad), operands);
}

class Conv2dBackwardInputOp final : public Op {
 public:
  Conv2dBackwardInputOp(Size2 input_size, Conv2dOptions options)
      : a_{input_size, std::move(options)} {}
  const detail::Conv2dBackwardInputAttrs& backward_input_attrs() const { return a_; }
  const char* name() const override { return "conv2d_backward_input"; }
  nlohmann::json attrs() const override {
    nlohmann::json a = detail::conv_attrs(a_.options);
    a["input_size"] = {a_.input_size.h, a_.input_size.w};
    return a;
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &grad = in[0], &w = in[1];
    detail::check_conv_options(name(), a_.options, loc);
    detail::check_activation(name(), "grad", grad, Tensor(), loc);
    detail::check_weight(name(), w, "(O,C/groups,kH,kW)", grad, loc);
    if (a_.input_size.h <= 0 || a_.input_size.w <= 0)
      fail(name(), loc, "expected a positive input_size, but got [{}, {}] (grad {})",
           a_.input_size.h, a_.input_size.w, grad.describe());
    if (w.dim_size(0) % a_.options.groups != 0)
      fail(name(), loc,
           "expected the weight's {} output channels to be divisible by groups {}, but got {}",
           w.dim_size(0), a_.options.groups, w.describe());
    if (grad.dim_size(-3) != w.dim_size(0))
      fail(name(), loc, "expected grad with {} channels (weight {}), but got {}", w.dim_size(0),
           short_desc(w), short_desc(grad));
    const Shape xs =
        detail::conv_backward_input_shape(grad, w.shape(), a_.options.groups, a_.input_size);
    const std::string operands = "grad " + short_desc(grad) + " and weight " + short_desc(w);
    std::optional<ConvGeometry> g = detail::conv_geometry(xs, w.shape(), a_.options);
    if (!g)
      detail::fail_kernel_fit(name(), a_.input_size.h, a_.input_size.w, w.dim_size(2),
                              w.dim_size(3), a_.options, operands, loc);
    check_grad_size(name(), grad, *g, "weight " + short_desc(w), loc);
    // A channels-last float32 grad runs oneDNN's NHWC kernel, which writes the input's gradient
    // channels-last too (Note [channels-last training] in kiln/backend/onednn/conv_primitives.h).
    const bool last = grad.dim() == 4 && grad.dtype() == DType::Float32 && grad.is_channels_last();
    return {{xs, grad.dtype(), grad.device(),
             last ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous}};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>&) const override {
    return detail::conv_flops(in[0], in[1]);
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &grad = ctx.inputs[0], &w = ctx.inputs[1], &u = ctx.grads[0];
    const Shape& ws = ctx.input_metas[1].shape;
    Tensor g_grad, g_weight;
    if (ctx.needs_grad[0]) g_grad = conv2d(u, w, Tensor(), a_.options);
    if (ctx.needs_grad[1]) g_weight = conv2d_backward_weight(u, grad, {ws[2], ws[3]}, a_.options);
    return {g_grad, g_weight};
  }

 private:
  detail::Conv2dBackwardInputAttrs a_;
};

class Conv2dBackwardWeightOp final : public Op {
 public:
  Conv2dBackwardWeightOp(Size2 kernel_size, Conv2dOptions options)
      : a_{kernel_size, std::move(options)} {}
  const detail::Conv2dBackwardWeightAttrs& backward_weight_attrs() const { return a_; }
  const char* name() const override { return "conv2d_backward_weight"; }
  nlohmann::json attrs() const override {
    nlohmann::json a = detail::conv_attrs(a_.options);
    a["kernel_size"] = {a_.kernel_size.h, a_.kernel_size.w};
    return a;
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &grad = in[1];
    detail::check_conv_options(name(), a_.options, loc);
    detail::check_activation(name(), "input", x, Tensor(), loc);
    detail::check_activation(name(), "grad", grad, x, loc);
    const int64_t groups = a_.options.groups;
    if (a_.kernel_size.h <= 0 || a_.kernel_size.w <= 0)
      fail(name(), loc, "expected a positive kernel_size, but got [{}, {}]", a_.kernel_size.h,
           a_.kernel_size.w);
    const std::string operands = "input " + short_desc(x) + " and grad " + short_desc(grad);
    if (grad.dim() != x.dim() || (x.dim() == 4 && grad.dim_size(0) != x.dim_size(0)))
      fail(name(), loc, "expected input and grad with the same batch dims, but got {}", operands);
    if (x.dim_size(-3) % groups != 0 || grad.dim_size(-3) % groups != 0)
      fail(name(), loc, "expected input and grad channels divisible by groups {}, but got {}",
           groups, operands);
    const Shape ws = weight_shape(x, grad);
    std::optional<ConvGeometry> g = detail::conv_geometry(x.shape(), ws, a_.options);
    if (!g)
      detail::fail_kernel_fit(name(), x.dim_size(-2), x.dim_size(-1), ws[2], ws[3], a_.options,
                              operands, loc);
    check_grad_size(name(), grad, *g, "input " + short_desc(x), loc);
    return {{ws, x.dtype(), x.device()}};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return detail::conv_flops(in[1], out[0]);
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &x = ctx.inputs[0], &grad = ctx.inputs[1], &u = ctx.grads[0];
    const Shape& xs = ctx.input_metas[0].shape;
    Tensor g_input, g_grad;
    if (ctx.needs_grad[0])
      g_input = conv2d_backward_input(grad, u, {xs[xs.size() - 2], xs.back()}, a_.options);
    if (ctx.needs_grad[1]) g_grad = conv2d(x, u, Tensor(), a_.options);
    return {g_input, g_grad};
  }

 private:
  Shape weight_shape(const Tensor& x, const Tensor& grad) const {
    return detail::conv_backward_weight_shape(x, grad, a_.options.groups, a_.kernel_size);
  }

  detail::Conv2dBackwardWeightAttrs a_;
};

Size2 size2_attr(const Attrs& a, const char* key) {
  std::vector<int64_t> v = a.ints(key);
  if (v.size() != 2) a.fail(key, "must hold 2 integers (h, w)");
  return {v[0], v[1]};
}

KILN_REGISTER_OP("conv2d_backward_input",
                 (OpSchema{{"grad_output", "weight"}, {"grad_input"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const Conv2dBackwardInputOp>(
                       size2_attr(a, "input_size"), detail::conv_options_from_attrs(a));
                 });
KILN_REGISTER_OP("conv2d_backward_weight",
                 (OpSchema{{"input", "grad_output"}, {"grad_weight"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const Conv2dBackwardWeightOp>(
                       size2_attr(a, "kernel_size"), detail::conv_options_from_attrs(a));
                 });

}  // namespace

const detail::Conv2dBackwardInputAttrs& detail::conv2d_backward_input_attrs(const Op& op) {
  const auto* c = dynamic_cast<const Conv2dBackwardInputOp*>(&op);
  KILN_INTERNAL_ASSERT(c != nullptr,
                       std::string("conv2d_backward_input_attrs of op '") + op.name() + "'");
  return c->backward_input_attrs();
}

const detail::Conv2dBackwardWeightAttrs& detail::conv2d_backward_weight_attrs(const Op& op) {
  const auto* c = dynamic_cast<const Conv2dBackwardWeightOp*>(&op);
  KILN_INTERNAL_ASSERT(c != nullptr,
                       std::string("conv2d_backward_weight_attrs of op '") + op.name() + "'");
  return c->backward_weight_attrs();
}

Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight, Size2 input_size,
                             const Conv2dOptions& options, const Loc& loc) {
  return call_op<Conv2dBackwardInputOp>({grad, weight}, loc, input_size, options);
}

Tensor conv2d_backward_weight(const Tensor& input, const Tensor& grad, Size2 kernel_size,
                              const Conv2dOptions& options, const Loc& loc) {
  return call_op<Conv2dBackwardWeightOp>({input, grad}, loc, kernel_size, options);
}

}  // namespace kiln
