// conv2d_affine: a convolution with its inference epilogue fused (Note [conv epilogue]), the
// shape of conv -> batch_norm (evaluation) -> (+ residual) -> relu in ResNet-style blocks. Its
// kernel is in kiln/backend/onednn/conv_ops.cpp (Note [kernel table]).
//
// Note [low-precision conv epilogue]: with bfloat16 (or float16) input and weight, the scale and
// shift stay float32 (they are a batch norm's statistics folded: OpSchema::float32_inputs keeps
// them float32 under autocast too), the residual has the input's dtype, and so has the output.
// The epilogue is computed in float32 on the convolution's bfloat16-rounded result and rounded
// once at the end (composed() spells it out), so a ResNet block's activations stay 16-bit from
// one convolution to the next instead of going through float32 batch norms and casts. The fused
// kernel folds the scale into the 16-bit weights (rounding them once more) and adds the shift,
// the residual and the relu before its single rounding: it equals the composition within the
// 16-bit tolerance, not bit for bit.
#include "kiln/ops/autocast.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/conv_ops.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

using detail::ConvGeometry;
using detail::short_desc;

// Inputs: x, weight, scale, shift[, residual]. Like conv2d, the op holds its explicit policy
// (Note [conv algorithm]); conv2d_affine() emits it for inference only, but a rebuilt op with
// purpose "training" computes the same thing with the training kernels.
class Conv2dAffineOp final : public Op {
 public:
  Conv2dAffineOp(Conv2dOptions options, detail::ConvPurpose purpose, bool relu)
      : a_{std::move(options), purpose, relu} {}
  const detail::Conv2dAffineAttrs& conv2d_affine_attrs() const { return a_; }
  const char* name() const override { return "conv2d_affine"; }
  nlohmann::json attrs() const override {
    nlohmann::json a = detail::conv_forward_attrs(a_.options, a_.purpose);
    a["relu"] = a_.relu;
    return a;
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    if (x.dim() != 4)
      fail(name(), loc, "expected input of rank 4 (N,C,H,W), but got {}", x.describe());
    const ConvGeometry g =
        detail::checked_conv2d_geometry(name(), x, in[1], Tensor(), a_.options, loc);
    // Note [low-precision conv epilogue]: a 16-bit convolution's scale and shift are float32.
    const DType affine_dt = is_low_precision(x.dtype()) ? DType::Float32 : x.dtype();
    for (size_t i = 2; i < 4; ++i)
      if (in[i].shape() != Shape{g.o} || in[i].dtype() != affine_dt)
        fail(name(), loc,
             "expected {} of shape [{}] and dtype {} (input {}, weight {}), but got {}",
             i == 2 ? "scale" : "shift", g.o, dtype_name(affine_dt), short_desc(x),
             short_desc(in[1]), in[i].describe());
    const Shape out{g.n, g.o, g.oh, g.ow};
    if (in.size() > 4 && (in[4].shape() != out || in[4].dtype() != x.dtype()))
      fail(name(), loc, "expected residual of shape {} and dtype {} (the output's), but got {}",
           shape_str(out), dtype_name(x.dtype()), in[4].describe());
    // The output's layout follows the primitive (Note [channels-last]).
    const detail::ConvEpilogue fused = detail::fusable_epilogue(g, a_.policy(), x, a_.epilogue(in));
    return {
        {out, x.dtype(), x.device(), detail::conv_output_format(g, a_.policy(), x, false, &fused)}};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return detail::conv_flops(out[0], in[1]);
  }

  // conv2d_affine() records the composition instead whenever a gradient is needed.
  bool differentiable() const override { return false; }

 private:
  detail::Conv2dAffineAttrs a_;
};

// The definition, in public ops: differentiable, and what the fused op must equal. With 16-bit
// input, the epilogue runs in float32 and the result is rounded once (Note [low-precision conv
// epilogue]).
Tensor composed(const Tensor& x, const Tensor& weight, const Tensor& scale, const Tensor& shift,
                const Tensor& residual, bool relu_after, const Conv2dOptions& o, const Loc& loc) {
  const bool low = is_low_precision(x.dtype());
  Tensor y = conv2d(x, weight, Tensor(), o, loc);
  if (low) y = to_dtype(y, DType::Float32, loc);
  y = channel_affine(y, scale, shift, loc);
  if (residual.defined()) y = add(y, low ? to_dtype(residual, DType::Float32, loc) : residual, loc);
  if (relu_after) y = relu(y, loc);
  return low ? to_dtype(y, x.dtype(), loc) : y;
}

KILN_REGISTER_OP("conv2d_affine",
                 (OpSchema{{"input", "weight", "scale", "shift", "residual?"},
                           {"output"},
                           AutocastPolicy::kLowPrecision,
                           {"scale", "shift"}}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const Conv2dAffineOp>(
                       detail::conv_options_from_attrs(a),
                       detail::conv_policy_from_attrs(a).purpose, a.b("relu"));
                 });

}  // namespace

const detail::Conv2dAffineAttrs& detail::conv2d_affine_attrs(const Op& op) {
  const auto* c = dynamic_cast<const Conv2dAffineOp*>(&op);
  KILN_INTERNAL_ASSERT(c != nullptr, std::string("conv2d_affine_attrs of op '") + op.name() + "'");
  return c->conv2d_affine_attrs();
}

Tensor conv2d_affine(const Tensor& input, const Tensor& weight, const Tensor& scale,
                     const Tensor& shift, const Tensor& residual, bool relu_after,
                     const Conv2dOptions& options, const Loc& loc) {
  std::vector<Tensor> in{input, weight, scale, shift};
  if (residual.defined()) in.push_back(residual);
  in = detail::autocast_inputs_for("conv2d_affine", in, loc);  // checked as dispatched
  const detail::ConvPolicy policy = detail::resolve_conv_policy(options.algorithm, in);
  // the fused op's checks and errors
  Conv2dAffineOp(options, policy.purpose, relu_after).infer(in, loc);
  // Note [conv2d_affine emits]: the fused op only where oneDNN fuses the epilogue into the
  // kernel; elsewhere (a gradient being recorded, float16, bfloat16 without native kernels) the
  // composition is as fast and exact. The choice reads only dtypes, layouts and the geometry, so
  // meta inputs emit what real ones would: a trace records the ops eager runs. The grad-mode test
  // here (in resolve_conv_policy) chooses which ops are emitted, each with a fixed meaning (the
  // fused op is not differentiable, the composition is), never what an emitted op computes, so a
  // recorded op stream replays the same in every mode.
  bool fuses = false;
  if (policy.inference()) {
    const ConvGeometry g = *detail::conv_geometry(input.shape(), weight.shape(), options);
    const detail::ConvEpilogue e = detail::fusable_epilogue(
        g, policy, in[0], {in[2], in[3], residual.defined() ? in[4] : Tensor(), relu_after});
    fuses = e.scale.defined() || e.residual.defined() || e.relu;
  }
  // The autocast-cast operands (in), not the caller's: without native bfloat16 kernels the
  // composition must compute in the region's dtype too.
  if (!fuses)
    return composed(in[0], in[1], in[2], in[3], residual.defined() ? in[4] : Tensor(), relu_after,
                    options, loc);
  return call_op<Conv2dAffineOp>(in, loc, options, policy.purpose, relu_after);
}

}  // namespace kiln
