// pad (constant / reflect / replicate) and pad_backward: definitions only (validation,
// attributes, infer, vjp). Their kernels, which work from per-dim source tables, are in
// kiln/backend/cpu/pad_ops.cpp (Note [kernel table]).
#include "kiln/ops/pad.h"

#include <fmt/ranges.h>
#include <algorithm>

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/pad_ops.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

using detail::PadMode;
using detail::parse_pad_mode;

std::string pads_str(const std::vector<int64_t>& pads) {
  return fmt::format("({})", fmt::join(pads, ", "));
}

// Validates pads against `in` and returns the padded shape. `t` is the tensor the caller passed
// (x for pad, grad for pad_backward), for the error text.
Shape padded_shape(const char* op, const Shape& in, const std::vector<int64_t>& pads, PadMode mode,
                   const std::string& mode_name, const Tensor& t, const Loc& loc) {
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t k = static_cast<int64_t>(pads.size()) / 2;
  if (pads.size() % 2 != 0 || k > rank)
    fail(op, loc, "expected an even number of pads, at most 2 per dim, but got pads {} for {}",
         pads_str(pads), t.describe());
  if (mode != PadMode::kConstant && k > 3)
    fail(op, loc, "expected {} padding of at most the last 3 dims, but got pads {} for {}",
         mode_name, pads_str(pads), t.describe());
  Shape out = in;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t d = rank - 1 - j, before = pads[2 * j], after = pads[2 * j + 1];
    out[d] = in[d] + before + after;
    bool ok = out[d] >= 0;
    if (mode == PadMode::kReflect)
      ok = before >= 0 && after >= 0 && before < in[d] && after < in[d];
    if (mode == PadMode::kReplicate) ok = before >= 0 && after >= 0 && in[d] > 0;
    if (!ok)
      fail(op, loc, "expected {} pads {} valid for dim {} of size {} ({}), but got pads {} for {}",
           mode_name, pads_str({before, after}), d, in[d],
           mode == PadMode::kReflect     ? "each pad in [0, size)"
           : mode == PadMode::kReplicate ? "pads >= 0 on a non-empty dim"
                                         : "the padded size must be >= 0",
           pads_str(pads), t.describe());
  }
  return out;
}

std::vector<int64_t> negated(std::vector<int64_t> pads) {
  for (int64_t& p : pads) p = -p;
  return pads;
}

class PadOp final : public Op {
 public:
  PadOp(std::vector<int64_t> pads, std::string mode, double value)
      : a_{std::move(pads), std::move(mode), value} {}
  const char* name() const override { return "pad"; }
  nlohmann::json attrs() const override {
    return {{"pads", a_.pads}, {"mode", a_.mode}, {"value", attr_double(a_.value)}};
  }
  const detail::PadAttrs& pad_attrs() const { return a_; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    PadMode m = parse_pad_mode(name(), a_.mode, x, loc);
    return {{padded_shape(name(), x.shape(), a_.pads, m, a_.mode, x, loc), x.dtype(), x.device()}};
  }

  Saves saves() const override { return {false, false}; }

  // A constant pad's adjoint is the opposite pad: crop what was added, zero-fill what was cropped.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    if (a_.mode == "constant") return {pad(ctx.grads[0], negated(a_.pads), "constant", 0.0)};
    return {pad_backward(ctx.grads[0], ctx.sizes_of(0), a_.pads, a_.mode)};
  }

 private:
  detail::PadAttrs a_;
};

class PadBackwardOp final : public Op {
 public:
  PadBackwardOp(Shape input_shape, std::vector<int64_t> pads, std::string mode)
      : a_{std::move(input_shape), std::move(pads), std::move(mode)} {}
  const char* name() const override { return "pad_backward"; }
  nlohmann::json attrs() const override {
    return {{"input_shape", a_.input_shape}, {"pads", a_.pads}, {"mode", a_.mode}};
  }
  const detail::PadBackwardAttrs& pad_backward_attrs() const { return a_; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& g = in[0];
    PadMode m = parse_pad_mode(name(), a_.mode, g, loc);
    if (!is_floating(g.dtype()))
      fail(name(), loc, "expected a floating-point grad, but got {}", g.describe());
    Shape out = padded_shape(name(), a_.input_shape, a_.pads, m, a_.mode, g, loc);
    if (out != g.shape())
      fail(name(), loc, "expected grad of the padded shape {} (input {} with pads {}), but got {}",
           shape_str(out), shape_str(a_.input_shape), pads_str(a_.pads), g.describe());
    return {{a_.input_shape, g.dtype(), g.device()}};
  }

  Saves saves() const override { return {false, false}; }

  // Linear in grad; its adjoint is pad itself (with zeros where pad fills).
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    return {pad(ctx.grads[0], a_.pads, a_.mode, 0.0)};
  }

 private:
  detail::PadBackwardAttrs a_;
};

KILN_REGISTER_OP("pad", (OpSchema{{"input"}, {"output"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const PadOp>(a.ints("pads"), a.s("mode"), a.f("value"));
                 });
KILN_REGISTER_OP("pad_backward", (OpSchema{{"grad_output"}, {"grad_input"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const PadBackwardOp>(a.ints("input_shape"),
                                                                a.ints("pads"), a.s("mode"));
                 });

}  // namespace

PadMode detail::parse_pad_mode(const char* op, const std::string& mode, const Tensor& t,
                               const Loc& loc) {
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "replicate") return PadMode::kReplicate;
  fail(op, loc, "expected mode \"constant\", \"reflect\" or \"replicate\", but got \"{}\" for {}",
       mode, t.describe());
}

const detail::PadAttrs& detail::pad_attrs(const Op& op) {
  const auto* o = dynamic_cast<const PadOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("pad_attrs of op '") + op.name() + "'");
  return o->pad_attrs();
}

const detail::PadBackwardAttrs& detail::pad_backward_attrs(const Op& op) {
  const auto* o = dynamic_cast<const PadBackwardOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("pad_backward_attrs of op '") + op.name() + "'");
  return o->pad_backward_attrs();
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value,
           const Loc& loc) {
  return call_op<PadOp>({x}, loc, pads, mode, value);
}

Tensor pad_backward(const Tensor& grad, SizeList input_shape, const std::vector<int64_t>& pads,
                    const std::string& mode, const Loc& loc) {
  const SymAttrScope sym("pad_backward", input_shape.sym_attrs("/input_shape"));
  return call_op<PadBackwardOp>({grad}, loc, input_shape.take(), pads, mode);
}

}  // namespace kiln
