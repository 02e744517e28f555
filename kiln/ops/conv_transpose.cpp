// conv_transpose2d as an op of its own (ONNX ConvTranspose): a composite (Note [composite ops])
// computed as conv2d_backward_input of the output size plus the bias; its gradients are conv2d
// (input) and conv2d_backward_weight (weight), the adjoints of that map.
#include "kiln/ops/binary.h"
#include "kiln/ops/composite_op.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/conv_geometry.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

nlohmann::json size2_json(Size2 s) {
  return nlohmann::json::array({s.h, s.w});
}

Size2 size2_attr(const Attrs& a, const char* key) {
  const std::vector<int64_t> v = a.ints(key);
  if (v.size() != 2) a.fail(key, "must be [h, w]");
  return {v[0], v[1]};
}

class ConvTranspose2dOp final : public CompositeOp {
 public:
  ConvTranspose2dOp(ConvTranspose2dOptions options, bool has_bias)
      : t_(options), has_bias_(has_bias) {}
  const char* name() const override { return "conv_transpose2d"; }
  nlohmann::json attrs() const override {
    return {{"stride", size2_json(t_.stride)},
            {"padding", size2_json(t_.padding)},
            {"output_padding", size2_json(t_.output_padding)},
            {"dilation", size2_json(t_.dilation)},
            {"groups", t_.groups},
            {"has_bias", has_bias_}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const char* op = name();
    if (in.size() != (has_bias_ ? 3u : 2u))
      fail(op, loc, "expected {} inputs (input, weight{}), but got {}", has_bias_ ? 3 : 2,
           has_bias_ ? ", bias" : "", in.size());
    const Tensor &input = in[0], &weight = in[1];
    detail::check_conv_options(op, conv_options(), loc);
    detail::check_activation(op, "input", input, Tensor(), loc);
    detail::check_weight(op, weight, "(C,O/groups,kH,kW)", input, loc);
    if (weight.dim_size(1) == 0)
      fail(op, loc, "expected a weight with at least one output channel, but got {}",
           weight.describe());
    if (weight.dim_size(0) % t_.groups != 0)
      fail(op, loc,
           "expected the weight's {} input channels to be divisible by groups {}, but got {}",
           weight.dim_size(0), t_.groups, weight.describe());
    if (input.dim_size(-3) != weight.dim_size(0))
      fail(op, loc, "expected input with {} channels (weight {}, groups {}), but got {}",
           weight.dim_size(0), detail::short_desc(weight), t_.groups, detail::short_desc(input));
    const int64_t channels = weight.dim_size(1) * t_.groups;
    if (has_bias_) {
      const Tensor& bias = in[2];
      if (bias.dim() != 1 || bias.dim_size(0) != channels || bias.dtype() != input.dtype())
        fail(op, loc, "expected bias of shape [{}] and dtype {} (weight {}, groups {}), but got {}",
             channels, dtype_name(input.dtype()), detail::short_desc(weight), t_.groups,
             bias.describe());
    }
    const Size2 &s = t_.stride, &op_pad = t_.output_padding;
    if (op_pad.h < 0 || op_pad.w < 0 || op_pad.h >= s.h || op_pad.w >= s.w)
      fail(op, loc,
           "expected a non-negative output_padding smaller than the stride, but got "
           "output_padding [{}, {}] with stride [{}, {}]",
           op_pad.h, op_pad.w, s.h, s.w);
    const Size2 out = output_size(input, weight);
    if (out.h <= 0 || out.w <= 0)
      fail(op, loc,
           "expected a positive output size, but got {}x{} for input {}, weight {}, padding [{}, "
           "{}]",
           out.h, out.w, detail::short_desc(input), detail::short_desc(weight), t_.padding.h,
           t_.padding.w);
    Shape shape = input.shape();
    shape[shape.size() - 3] = channels;
    shape[shape.size() - 2] = out.h;
    shape[shape.size() - 1] = out.w;
    return {{shape, input.dtype(), input.device()}};
  }

  std::vector<Tensor> decompose(const std::vector<Tensor>& in) const override {
    const Loc& loc = kernel_call_site();
    Tensor out =
        conv2d_backward_input(in[0], in[1], output_size(in[0], in[1]), conv_options(), loc);
    if (has_bias_) out = add(out, reshape(in[2], {in[2].dim_size(0), 1, 1}, loc), loc);
    return {contiguous(out, loc)};
  }

  // The input's gradient reads the weight, the weight's reads the input.
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    return {true, false, ~uint64_t{0}, (needs_grad[1] ? 1u : 0u) | (needs_grad[0] ? 2u : 0u)};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Loc& loc = ctx.loc;
    const bool unbatched = ctx.input_metas[0].shape.size() == 3;
    const Tensor g = unbatched ? unsqueeze(ctx.grads[0], 0, loc) : ctx.grads[0];
    const Shape& sw = ctx.input_metas[1].shape;
    std::vector<Tensor> grads(ctx.input_metas.size());
    if (ctx.needs_grad[0]) {
      Tensor gx = conv2d(g, ctx.inputs[1], Tensor(), conv_options(), loc);
      grads[0] = unbatched ? squeeze(gx, 0, loc) : gx;
    }
    if (ctx.needs_grad[1]) {
      const Tensor x = unbatched ? unsqueeze(ctx.inputs[0], 0, loc) : ctx.inputs[0];
      grads[1] = conv2d_backward_weight(g, x, {sw[2], sw[3]}, conv_options(), loc);
    }
    if (has_bias_ && ctx.needs_grad[2]) grads[2] = sum(g, {0, 2, 3}, false, loc);
    return grads;
  }

 private:
  Conv2dOptions conv_options() const {
    return Conv2dOptions{t_.stride, Padding(t_.padding.h, t_.padding.w), t_.dilation, t_.groups};
  }
  Size2 output_size(const Tensor& input, const Tensor& weight) const {
    const Size2 &s = t_.stride, &p = t_.padding, &d = t_.dilation, &op = t_.output_padding;
    return {(input.dim_size(-2) - 1) * s.h - 2 * p.h + d.h * (weight.dim_size(2) - 1) + op.h + 1,
            (input.dim_size(-1) - 1) * s.w - 2 * p.w + d.w * (weight.dim_size(3) - 1) + op.w + 1};
  }

  ConvTranspose2dOptions t_;
  bool has_bias_;
};

KILN_REGISTER_OP("conv_transpose2d",
                 (OpSchema{
                     {"input", "weight", "bias?"}, {"output"}, AutocastPolicy::kLowPrecision}),
                 [](const Attrs& a) -> OpPtr {
                   ConvTranspose2dOptions t;
                   t.stride = size2_attr(a, "stride");
                   t.padding = size2_attr(a, "padding");
                   t.output_padding = size2_attr(a, "output_padding");
                   t.dilation = size2_attr(a, "dilation");
                   t.groups = a.i("groups");
                   return std::make_shared<const ConvTranspose2dOp>(t, a.b("has_bias"));
                 });

}  // namespace

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dOptions& options, const Loc& loc) {
  std::vector<Tensor> in{input, weight};
  if (bias.defined()) in.push_back(bias);
  return dispatch1(std::make_shared<const ConvTranspose2dOp>(options, bias.defined()), in, loc);
}

}  // namespace kiln
