// fused_linear: activation(input @ weight^T + bias) as one op (kiln/ops/linalg.h), what the graph
// optimizer's fuse_linear pass makes of a linear whose only reader is its activation. Its CPU
// kernel is oneDNN's matmul with post-ops (kiln/backend/onednn/fused_linear_ops.cpp).
#include <string>

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/fused_linear.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

class FusedLinearOp final : public Op {
 public:
  FusedLinearOp(bool has_bias, std::string activation, const Loc& loc = Loc::current())
      : has_bias_(has_bias), activation_(std::move(activation)) {
    if (activation_ != "relu" && activation_ != "none")
      fail(name(), loc, "expected activation \"relu\" or \"none\", but got \"{}\"", activation_);
  }
  const char* name() const override { return "fused_linear"; }
  nlohmann::json attrs() const override {
    return {{"has_bias", has_bias_}, {"activation", activation_}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    return {detail::linear_meta(name(), in, has_bias_, loc)};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(in[1].dim_size(-1));
  }

  // x for the weight's gradient, the weight for x's, the output for relu's mask.
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    return {true, activation_ == "relu", ~uint64_t{0},
            (needs_grad[1] ? 1u : 0u) | (needs_grad[0] ? 2u : 0u)};
  }

  // relu's gradient from the output (y > 0 exactly where the pre-activation is), then linear's.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor g =
        activation_ == "relu" ? relu_backward(ctx.grads[0], ctx.outputs[0], ctx.loc) : ctx.grads[0];
    return detail::linear_grads(ctx, g);
  }

 private:
  bool has_bias_;
  std::string activation_;
};

KILN_REGISTER_OP("fused_linear",
                 (OpSchema{
                     {"input", "weight", "bias?"}, {"output"}, AutocastPolicy::kLowPrecision}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const FusedLinearOp>(a.b("has_bias"), a.s("activation"));
                 });

}  // namespace

Tensor fused_linear(const Tensor& input, const Tensor& weight, const Tensor& bias,
                    const std::string& activation, const Loc& loc) {
  std::vector<Tensor> in{input, weight};
  if (bias.defined()) in.push_back(bias);
  return dispatch1(std::make_shared<const FusedLinearOp>(bias.defined(), activation, loc), in, loc);
}

}  // namespace kiln
