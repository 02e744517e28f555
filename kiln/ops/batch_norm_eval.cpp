// batch_norm in evaluation mode as an op of its own (ONNX BatchNormalization with running
// statistics): a composite (Note [composite ops]) that folds the statistics into a per-channel
// scale and shift and runs channel_affine, the one-pass kernel.
#include "kiln/ops/binary.h"
#include "kiln/ops/composite_op.h"
#include "kiln/ops/elementwise_layout.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

// Inputs: x [N, C, ...], running_mean [C], running_var [C], then weight [C] and bias [C] when
// the attrs say so. The statistics may have another floating dtype than x (float32 statistics
// of a float64 model); they are converted, as PyTorch does.
class BatchNormEvalOp final : public CompositeOp {
 public:
  BatchNormEvalOp(double eps, bool has_weight, bool has_bias)
      : eps_(eps), has_weight_(has_weight), has_bias_(has_bias) {}
  const char* name() const override { return "batch_norm_eval"; }
  nlohmann::json attrs() const override {
    return {{"eps", attr_double(eps_)}, {"has_weight", has_weight_}, {"has_bias", has_bias_}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const size_t expected = 3 + (has_weight_ ? 1 : 0) + (has_bias_ ? 1 : 0);
    if (in.size() != expected)
      fail(name(), loc, "expected {} inputs (x, running_mean, running_var{}{}), but got {}",
           expected, has_weight_ ? ", weight" : "", has_bias_ ? ", bias" : "", in.size());
    const Tensor& x = in[0];
    if (x.dim() < 2 || !is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input of rank >= 2 (N, C, ...), but got {}",
           x.describe());
    const Shape c{x.dim_size(1)};
    for (size_t i = 1; i < in.size(); ++i) {
      const bool stat = i < 3;
      const char* what = i == 1 ? "running_mean" : i == 2 ? "running_var" : weight_index(i);
      if (in[i].shape() != c || (stat ? !is_floating(in[i].dtype()) : in[i].dtype() != x.dtype()))
        fail(name(), loc, "expected {} of shape [{}] and {} (for input {}), but got {}", what,
             x.dim_size(1),
             stat ? std::string("a floating dtype") : "dtype " + std::string(dtype_name(x.dtype())),
             x.describe(), in[i].describe());
    }
    return {{x.shape(), x.dtype(), x.device(), elementwise_format({x}, x.shape())}};
  }

  std::vector<Tensor> decompose(const std::vector<Tensor>& in) const override {
    const Loc& loc = kernel_call_site();
    const Tensor& x = in[0];
    Tensor scale = rstd(in, loc);
    if (has_weight_) scale = mul(in[3], scale, loc);
    Tensor shift = neg(mul(to_dtype(in[1], x.dtype(), loc), scale, loc), loc);
    if (has_bias_) shift = add(in.back(), shift, loc);
    return {channel_affine(x, scale, shift, loc)};
  }

  // x's gradient is g times the folded scale; the weight's reads x through xhat; the statistics
  // are buffers and get none.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Loc& loc = ctx.loc;
    const std::vector<Tensor>& in = ctx.inputs;
    const Tensor& g = ctx.grads[0];
    const Shape& xs = ctx.input_metas[0].shape;
    Shape cs(xs.size(), 1);
    cs[1] = xs[1];
    const Shape c{xs[1]};
    std::vector<Tensor> grads(in.size());
    const size_t bias_index = has_weight_ ? 4 : 3;
    if (ctx.needs_grad[0] || (has_weight_ && ctx.needs_grad[3])) {
      const Tensor r = rstd(in, loc);
      if (ctx.needs_grad[0])
        grads[0] = mul(g, reshape(has_weight_ ? mul(in[3], r, loc) : r, cs, loc), loc);
      if (has_weight_ && ctx.needs_grad[3]) {
        const Tensor mean = reshape(to_dtype(in[1], in[0].dtype(), loc), cs, loc);
        const Tensor xhat = mul(sub(in[0], mean, loc), reshape(r, cs, loc), loc);
        grads[3] = reshape(sum_to(mul(g, xhat, loc), cs, loc), c, loc);
      }
    }
    if (has_bias_ && ctx.needs_grad[bias_index])
      grads[bias_index] = reshape(sum_to(g, cs, loc), c, loc);
    return grads;
  }

 private:
  const char* weight_index(size_t i) const { return i == 3 && has_weight_ ? "weight" : "bias"; }
  // 1 / sqrt(running_var + eps), in x's dtype.
  Tensor rstd(const std::vector<Tensor>& in, const Loc& loc) const {
    return rsqrt(add(to_dtype(in[2], in[0].dtype(), loc), eps_, loc), loc);
  }

  double eps_;
  bool has_weight_, has_bias_;
};

KILN_REGISTER_OP("batch_norm_eval",
                 (OpSchema{{"input", "running_mean", "running_var", "weight?", "bias?"},
                           {"output"},
                           AutocastPolicy::kFloat32}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const BatchNormEvalOp>(a.f("eps"), a.b("has_weight"),
                                                                  a.b("has_bias"));
                 });

}  // namespace

Tensor detail::batch_norm_eval(const Tensor& x, const Tensor& running_mean,
                               const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                               double eps, const Loc& loc) {
  std::vector<Tensor> in{x, running_mean, running_var};
  if (weight.defined()) in.push_back(weight);
  if (bias.defined()) in.push_back(bias);
  return dispatch1(std::make_shared<const BatchNormEvalOp>(eps, weight.defined(), bias.defined()),
                   in, loc);
}

}  // namespace kiln
