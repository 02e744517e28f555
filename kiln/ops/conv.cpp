// conv2d (the primitive, with a fused bias). conv_transpose2d is in conv_transpose.cpp, the
// backward ops in conv_backward.cpp; the kernels are in kiln/backend/onednn/conv_ops.cpp (Note
// [kernel table]).
#include "kiln/ops/conv.h"

#include <fmt/format.h>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv_ops.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

Padding::Padding(std::string m) : mode(std::move(m)) {
  if (mode == "same")
    kind = Kind::kSame;
  else if (mode == "valid")
    kind = Kind::kValid;
  else
    kind = Kind::kInvalid;
}

Padding Padding::asymmetric(int64_t top, int64_t bottom, int64_t left, int64_t right) {
  Padding p(0);
  p.top = top;
  p.bottom = bottom;
  p.left = left;
  p.right = right;
  return p;
}

std::string Padding::str() const {
  if (kind != Kind::kExplicit) return mode;
  return fmt::format("[{}, {}, {}, {}]", top, bottom, left, right);
}

namespace detail {

// The one place (with conv2d_affine's choice of ops) where the convolution family reads grad
// mode: at call time, to write the decision into the op (Note [conv algorithm]).
ConvPolicy resolve_conv_policy(ConvAlgorithm algorithm, const std::vector<Tensor>& inputs) {
  bool recorded = false;
  if (GradMode::is_enabled())
    for (const Tensor& t : inputs) recorded = recorded || (t.defined() && t.requires_grad());
  return {algorithm, recorded ? ConvPurpose::kTraining : ConvPurpose::kInference};
}

ConvGeometry checked_conv2d_geometry(const char* op, const Tensor& x, const Tensor& w,
                                     const Tensor& b, const Conv2dOptions& o, const Loc& loc) {
  detail::check_conv_options(op, o, loc);
  detail::check_activation(op, "input", x, Tensor(), loc);
  detail::check_weight(op, w, "(O,C/groups,kH,kW)", x, loc);
  if (x.dim_size(-1) == 0 || x.dim_size(-2) == 0)
    fail(op, loc,
         "expected an input with non-empty H and W (only N and C may be 0, as in PyTorch), but "
         "got {}",
         x.describe());
  if (w.dim_size(0) == 0)
    fail(op, loc, "expected a weight with at least one output channel, but got {}", w.describe());
  if (w.dim_size(0) % o.groups != 0)
    fail(op, loc,
         "expected the weight's {} output channels to be divisible by groups {}, but got {}",
         w.dim_size(0), o.groups, w.describe());
  const int64_t channels = w.dim_size(1) * o.groups;
  if (x.dim_size(-3) != channels)
    fail(op, loc, "expected input with {} channels (weight {}, groups {}), but got {}", channels,
         short_desc(w), o.groups, short_desc(x));
  if (b.defined()) {
    if (b.dim() != 1 || b.dim_size(0) != w.dim_size(0))
      fail(op, loc, "expected bias of shape [{}] (weight {}), but got {}", w.dim_size(0),
           short_desc(w), b.describe());
    if (b.dtype() != x.dtype())
      fail(op, loc, "expected bias of the same dtype as the input {}, but got {}", short_desc(x),
           b.describe());
  }
  std::optional<ConvGeometry> g = detail::conv_geometry(x.shape(), w.shape(), o);
  if (!g)
    detail::fail_kernel_fit(op, x.dim_size(-2), x.dim_size(-1), w.dim_size(2), w.dim_size(3), o,
                            "input " + short_desc(x) + " and weight " + short_desc(w), loc);
  return *g;
}

}  // namespace detail

namespace {

using detail::ConvGeometry;
using detail::short_desc;

Shape activation_shape(bool batched, int64_t n, int64_t c, int64_t h, int64_t w) {
  return batched ? Shape{n, c, h, w} : Shape{c, h, w};
}

// The policy's algorithm is options.algorithm; purpose is what conv2d() resolved.
class Conv2dOp final : public Op {
 public:
  Conv2dOp(Conv2dOptions options, detail::ConvPurpose purpose) : a_{std::move(options), purpose} {}
  const detail::Conv2dAttrs& conv2d_attrs() const { return a_; }
  const char* name() const override { return "conv2d"; }
  nlohmann::json attrs() const override {
    return detail::conv_forward_attrs(a_.options, a_.purpose);
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    const ConvGeometry g = detail::checked_conv2d_geometry(
        name(), x, in[1], in.size() > 2 ? in[2] : Tensor(), a_.options, loc);
    // The output's layout follows the primitive (Note [channels-last]).
    return {{activation_shape(x.dim() == 4, g.n, g.o, g.oh, g.ow), x.dtype(), x.device(),
             detail::conv_output_format(g, a_.policy(), x, in.size() > 2)}};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return detail::conv_flops(out[0], in[1]);
  }

  // The input's gradient reads the weight and the weight's the input; the bias is never read.
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    Saves s;
    s.input_mask = (needs_grad[1] ? 1u : 0u) | (needs_grad[0] ? 2u : 0u);
    return s;
  }

  // conv2d is bilinear in (input, weight): each gradient is the other backward op of the same
  // geometry, so higher-order gradients need nothing more.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &g = ctx.grads[0];
    const Shape &xs = ctx.input_metas[0].shape, &ws = ctx.input_metas[1].shape;
    std::vector<Tensor> grads(ctx.input_metas.size());
    if (ctx.needs_grad[0])
      grads[0] = conv2d_backward_input(g, w, {xs[xs.size() - 2], xs.back()}, a_.options);
    if (ctx.needs_grad[1]) grads[1] = conv2d_backward_weight(x, g, {ws[2], ws[3]}, a_.options);
    if (grads.size() > 2 && ctx.needs_grad[2])
      grads[2] = g.dim() == 4 ? sum(g, {0, 2, 3}) : sum(g, {1, 2});
    return grads;
  }

 private:
  detail::Conv2dAttrs a_;
};

KILN_REGISTER_OP(
    "conv2d", (OpSchema{{"input", "weight", "bias?"}, {"output"}, AutocastPolicy::kLowPrecision}),
    [](const Attrs& a) -> OpPtr {
      return std::make_shared<const Conv2dOp>(detail::conv_options_from_attrs(a),
                                              detail::conv_policy_from_attrs(a).purpose);
    });

}  // namespace

const detail::Conv2dAttrs& detail::conv2d_attrs(const Op& op) {
  const auto* c = dynamic_cast<const Conv2dOp*>(&op);
  KILN_INTERNAL_ASSERT(c != nullptr, std::string("conv2d_attrs of op '") + op.name() + "'");
  return c->conv2d_attrs();
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options, const Loc& loc) {
  std::vector<Tensor> in{input, weight};
  if (bias.defined()) in.push_back(bias);
  const detail::ConvPurpose purpose = detail::resolve_conv_policy(options.algorithm, in).purpose;
  return dispatch1(std::make_shared<const Conv2dOp>(options, purpose), in, loc);
}

}  // namespace kiln
