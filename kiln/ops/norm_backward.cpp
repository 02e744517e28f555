// batch_norm_backward: batch normalization's first-order gradient as one fused op (two passes
// over grad_out and x, Note [batch-norm kernels]; the kernel is in kiln/backend/cpu/norm_ops.cpp).
// batch_norm's vjp uses it when no graph of the gradient is being built; with create_graph it uses
// its decomposition into public ops, which is differentiable. This op itself is not: its vjp says
// so.
#include <fmt/format.h>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/norm_ops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// Inputs: grad_out, x, mean, var, then weight if has_weight, then grad_mean and grad_var if
// has_stat_grads. Outputs: grad_input, grad_weight, grad_bias (always all three).
class BatchNormBackwardOp final : public Op {
 public:
  BatchNormBackwardOp(double eps, bool has_weight, bool has_stat_grads)
      : a_{eps, has_weight, has_stat_grads} {}
  const detail::BatchNormBackwardAttrs& backward_attrs() const { return a_; }
  const char* name() const override { return "batch_norm_backward"; }
  nlohmann::json attrs() const override {
    return {{"eps", attr_double(a_.eps)},
            {"has_weight", a_.has_weight},
            {"has_stat_grads", a_.has_stat_grads}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &g = in[0], &x = in[1];
    if (x.dim() < 2 || !is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input of rank >= 2 (N, C, ...), but got {}",
           x.describe());
    if (g.shape() != x.shape() || g.dtype() != x.dtype() || g.device() != x.device())
      fail(name(), loc, "expected grad_out like input {}, but got {}", x.describe(), g.describe());
    const Shape c{x.dim_size(1)};
    const char* names[] = {"mean", "var", "weight", "grad_mean", "grad_var"};
    std::vector<const char*> what{names[0], names[1]};
    if (a_.has_weight) what.push_back(names[2]);
    if (a_.has_stat_grads) what.insert(what.end(), {names[3], names[4]});
    for (size_t i = 2; i < in.size(); ++i)
      if (in[i].shape() != c || in[i].dtype() != x.dtype() || in[i].device() != x.device())
        fail(name(), loc, "expected {} of shape [{}] and dtype {} (for input {}), but got {}",
             what[i - 2], x.dim_size(1), dtype_name(x.dtype()), x.describe(), in[i].describe());
    const TensorMeta param{c, x.dtype(), x.device()};
    const bool last = detail::batch_norm_keeps_channels_last(x);
    return {{x.shape(), x.dtype(), x.device(),
             last ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous},
            param,
            param};
  }

  std::vector<Tensor> vjp(const VjpContext&) const override {
    fail(name(), Loc::current(),
         "is batch_norm's fused first-order gradient and has no gradient itself; to "
         "differentiate batch_norm twice, run the first backward with create_graph = true "
         "(batch_norm then differentiates through its decomposition)");
  }

 private:
  detail::BatchNormBackwardAttrs a_;
};

KILN_REGISTER_OP("batch_norm_backward",
                 (OpSchema{
                     {"grad_output", "input", "mean", "var", "weight?", "grad_mean?", "grad_var?"},
                     {"grad_input", "grad_weight", "grad_bias"},
                     AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const BatchNormBackwardOp>(a.f("eps"), a.b("has_weight"),
                                                                      a.b("has_stat_grads"));
                 });

}  // namespace

const detail::BatchNormBackwardAttrs& detail::batch_norm_backward_attrs(const Op& op) {
  const auto* b = dynamic_cast<const BatchNormBackwardOp*>(&op);
  KILN_INTERNAL_ASSERT(b != nullptr,
                       std::string("batch_norm_backward_attrs of op '") + op.name() + "'");
  return b->backward_attrs();
}

std::vector<Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                        const Tensor& var, const Tensor& weight, double eps,
                                        const Tensor& grad_mean, const Tensor& grad_var,
                                        const Loc& loc) {
  if (grad_mean.defined() != grad_var.defined())
    fail("batch_norm_backward", loc,
         "expected grad_mean and grad_var both defined or both undefined, but got {} and {}",
         grad_mean.defined() ? grad_mean.describe() : "undefined",
         grad_var.defined() ? grad_var.describe() : "undefined");
  std::vector<Tensor> inputs{grad_out, x, mean, var};
  if (weight.defined()) inputs.push_back(weight);
  if (grad_mean.defined()) inputs.insert(inputs.end(), {grad_mean, grad_var});
  if (GradMode::is_enabled())
    for (const Tensor& t : inputs)
      if (t.requires_grad())
        fail("batch_norm_backward", loc,
             "cannot record a gradient for {}: this fused first-order gradient is not "
             "differentiable; call it under NoGradGuard, or differentiate batch_norm with "
             "create_graph = true (which uses its decomposition)",
             t.describe());
  return dispatch(
      std::make_shared<const BatchNormBackwardOp>(eps, weight.defined(), grad_mean.defined()),
      inputs, loc);
}

}  // namespace kiln
