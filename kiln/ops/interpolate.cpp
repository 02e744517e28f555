// interpolate (nearest / bilinear resize of [N, C, H, W]) and interpolate_backward; each is the
// other's vjp. Definitions only (option validation, attributes, infer, vjp); the kernels, driven by
// per-dim tap tables (Note [resize coordinate modes] in interpolate.h), are in
// kiln/backend/cpu/interpolate_ops.cpp (Note [kernel table]).
#include "kiln/ops/interpolate.h"

#include <cmath>

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/interpolate_ops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

using detail::Resize;

nlohmann::json resize_json(const Resize& r) {
  return {{"size", {r.out_h, r.out_w}},
          {"scale_factor", {attr_optional(r.factor_h), attr_optional(r.factor_w)}},
          {"mode", r.bilinear ? "bilinear" : "nearest"},
          {"coordinate_mode", r.coordinate_mode}};
}

Resize resize_from_json(const Attrs& a) {
  Resize r;
  std::vector<int64_t> size = a.ints("size");
  if (size.size() != 2) a.fail("size", "must hold 2 integers (h, w)");
  r.out_h = size[0], r.out_w = size[1];
  const nlohmann::json& f = a.at("scale_factor");
  if (!f.is_array() || f.size() != 2) a.fail("scale_factor", "must hold 2 entries (h, w)");
  nlohmann::json fh = {{"v", f[0]}}, fw = {{"v", f[1]}};
  r.factor_h = Attrs(a.op(), fh).opt_f("v");
  r.factor_w = Attrs(a.op(), fw).opt_f("v");
  const std::string mode = a.s("mode");
  if (mode != "bilinear" && mode != "nearest")
    a.fail("mode", "must be \"nearest\" or \"bilinear\"");
  r.bilinear = mode == "bilinear";
  r.coordinate_mode = a.s("coordinate_mode");
  return r;
}

// `t` is the tensor the caller passed, for error texts; `in` the [N, C, H, W] input shape.
Resize resolve(const char* op, const Shape& in, const InterpolateOptions& o, const Tensor& t,
               const Loc& loc) {
  if (in.size() != 4)
    fail(op, loc, "expected an input of rank 4 (N, C, H, W), but got {}",
         in == t.shape() ? t.describe() : shape_str(in) + " for " + t.describe());
  if (in[2] <= 0 || in[3] <= 0)
    fail(op, loc, "expected non-empty spatial dims, but got input shape {} for {}", shape_str(in),
         t.describe());
  Resize r;
  if (o.mode != "nearest" && o.mode != "bilinear")
    fail(op, loc, "expected mode \"nearest\" or \"bilinear\", but got \"{}\" for {}", o.mode,
         t.describe());
  r.bilinear = o.mode == "bilinear";
  r.coordinate_mode = o.coordinate_mode.empty()
                          ? (r.bilinear ? "align_corners_false" : "asymmetric")
                          : o.coordinate_mode;
  const std::string& c = r.coordinate_mode;
  const bool known = r.bilinear
                         ? (c == "align_corners" || c == "align_corners_false" ||
                            c == "half_pixel" || c == "pytorch_half_pixel" || c == "asymmetric")
                         : (c == "asymmetric" || c == "half_pixel");
  if (!known)
    fail(op, loc, "expected a coordinate_mode of {} for mode \"{}\", but got \"{}\" for {}",
         r.bilinear ? "\"align_corners\", \"align_corners_false\", \"half_pixel\", "
                      "\"pytorch_half_pixel\" or \"asymmetric\""
                    : "\"asymmetric\" or \"half_pixel\"",
         o.mode, c, t.describe());
  if (o.size.has_value() == o.scale_factor.has_value())
    fail(op, loc, "expected exactly one of size and scale_factor, but got {} for {}",
         o.size ? "both" : "neither", t.describe());
  if (o.size) {
    r.out_h = o.size->first;
    r.out_w = o.size->second;
  } else {
    const auto [fh, fw] = *o.scale_factor;
    if (!(fh > 0 && fw > 0 && std::isfinite(fh) && std::isfinite(fw)))
      fail(op, loc, "expected positive finite scale factors, but got ({}, {}) for {}", fh, fw,
           t.describe());
    r.factor_h = fh;
    r.factor_w = fw;
    r.out_h = static_cast<int64_t>(std::floor(static_cast<double>(in[2]) * fh));
    r.out_w = static_cast<int64_t>(std::floor(static_cast<double>(in[3]) * fw));
  }
  if (r.out_h <= 0 || r.out_w <= 0)
    fail(op, loc, "expected an output size > 0, but got ({}, {}) for input {}", r.out_h, r.out_w,
         t.describe());
  return r;
}

Tensor interpolate_resolved(const Tensor& x, const Resize& r, const Loc& loc);
Tensor interpolate_backward_resolved(const Tensor& g, SizeList input_shape, const Resize& r,
                                     const Loc& loc);

class InterpolateOp final : public Op {
 public:
  explicit InterpolateOp(Resize r) : r_(std::move(r)) {}
  const char* name() const override { return "interpolate"; }
  nlohmann::json attrs() const override { return resize_json(r_); }
  const Resize& interpolate_attrs() const { return r_; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    if (r_.bilinear && !is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input for bilinear mode, but got {}",
           x.describe());
    return {{{x.dim_size(0), x.dim_size(1), r_.out_h, r_.out_w}, x.dtype(), x.device()}};
  }

  Saves saves() const override { return {false, false}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    return {interpolate_backward_resolved(ctx.grads[0], ctx.sizes_of(0), r_, Loc::current())};
  }

 private:
  Resize r_;
};

class InterpolateBackwardOp final : public Op {
 public:
  InterpolateBackwardOp(Shape input_shape, Resize r) : a_{std::move(input_shape), std::move(r)} {}
  const char* name() const override { return "interpolate_backward"; }
  nlohmann::json attrs() const override {
    nlohmann::json j = resize_json(a_.resize);
    j["input_shape"] = a_.input_shape;
    return j;
  }
  const detail::InterpolateBackwardAttrs& interpolate_backward_attrs() const { return a_; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& g = in[0];
    if (!is_floating(g.dtype()))
      fail(name(), loc, "expected a floating-point grad, but got {}", g.describe());
    const Shape want{a_.input_shape[0], a_.input_shape[1], a_.resize.out_h, a_.resize.out_w};
    if (g.shape() != want)
      fail(name(), loc, "expected grad of the output shape {} (for input shape {}), but got {}",
           shape_str(want), shape_str(a_.input_shape), g.describe());
    return {{a_.input_shape, g.dtype(), g.device()}};
  }

  Saves saves() const override { return {false, false}; }

  // Linear in grad; the adjoint of the scatter is the forward resize.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    return {interpolate_resolved(ctx.grads[0], a_.resize, Loc::current())};
  }

 private:
  detail::InterpolateBackwardAttrs a_;
};

KILN_REGISTER_OP("interpolate", (OpSchema{{"input"}, {"output"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const InterpolateOp>(resize_from_json(a));
                 });
KILN_REGISTER_OP("interpolate_backward",
                 (OpSchema{{"grad_output"}, {"grad_input"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const InterpolateBackwardOp>(a.ints("input_shape"),
                                                                        resize_from_json(a));
                 });

Tensor interpolate_resolved(const Tensor& x, const Resize& r, const Loc& loc) {
  return call_op<InterpolateOp>({x}, loc, r);
}

Tensor interpolate_backward_resolved(const Tensor& g, SizeList input_shape, const Resize& r,
                                     const Loc& loc) {
  const SymAttrScope sym("interpolate_backward", input_shape.sym_attrs("/input_shape"));
  return call_op<InterpolateBackwardOp>({g}, loc, input_shape.take(), r);
}

}  // namespace

const detail::Resize& detail::interpolate_attrs(const Op& op) {
  const auto* o = dynamic_cast<const InterpolateOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("interpolate_attrs of op '") + op.name() + "'");
  return o->interpolate_attrs();
}

const detail::InterpolateBackwardAttrs& detail::interpolate_backward_attrs(const Op& op) {
  const auto* o = dynamic_cast<const InterpolateBackwardOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr,
                       std::string("interpolate_backward_attrs of op '") + op.name() + "'");
  return o->interpolate_backward_attrs();
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& options, const Loc& loc) {
  return interpolate_resolved(x, resolve("interpolate", x.shape(), options, x, loc), loc);
}

Tensor interpolate_backward(const Tensor& grad, const Shape& input_shape,
                            const InterpolateOptions& options, const Loc& loc) {
  return interpolate_backward_resolved(
      grad, input_shape, resolve("interpolate_backward", input_shape, options, grad, loc), loc);
}

}  // namespace kiln
