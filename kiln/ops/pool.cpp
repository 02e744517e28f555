// Max, average and adaptive average pooling: the forward ops (their gradients are the ops in
// pool_backward.cpp; the kernels are in kiln/backend/cpu/pool_ops.cpp, Note [kernel table], over
// the loops of kiln/backend/cpu/pool_kernels.cpp, Note [pooling kernels]).
#include "kiln/ops/pool.h"

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/pool_ops.h"

namespace kiln {

namespace {

using detail::avg_from_json;
using detail::avg_json;
using detail::avg_options;
using detail::avg_params;
using detail::AvgParams;
using detail::check_avg_params;
using detail::check_pool_input;
using detail::check_pool_params;
using detail::max_from_json;
using detail::max_json;
using detail::max_params;
using detail::pair_from_json;
using detail::pair_json;
using detail::PoolParams;
using detail::with_spatial;

class MaxPool2dOp final : public Op {
 public:
  // Both public functions run this op (the gradient needs the indices); the name says which one
  // the caller used, so that errors and traces name it.
  MaxPool2dOp(PoolParams p, bool return_indices) : p_(p), return_indices_(return_indices) {}
  const PoolParams& params() const { return p_; }
  const char* name() const override {
    return return_indices_ ? "max_pool2d_with_indices" : "max_pool2d";
  }
  nlohmann::json attrs() const override {
    nlohmann::json a = max_json(p_);
    a["return_indices"] = return_indices_;
    return a;
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    check_pool_input(name(), "input", x, loc);
    const Size2 out =
        check_pool_params(name(), p_, x.dim_size(-2), x.dim_size(-1), x.describe(), loc);
    const Shape shape = with_spatial(x.shape(), out.h, out.w);
    return {{shape, x.dtype(), x.device()}, {shape, DType::Int64, x.device()}};
  }

  // The gradient reads the indices only, not the values.
  Saves saves() const override { return {false, true, /*output_mask=*/2}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Shape& xs = ctx.input_metas[0].shape;
    return {max_pool2d_backward(ctx.grads[0], ctx.outputs[1], {xs[xs.size() - 2], xs.back()})};
  }

 private:
  PoolParams p_;
  bool return_indices_;
};

class AvgPool2dOp final : public Op {
 public:
  explicit AvgPool2dOp(AvgParams a) : a_(std::move(a)) {}
  const AvgParams& params() const { return a_; }
  const char* name() const override { return "avg_pool2d"; }
  nlohmann::json attrs() const override { return avg_json(a_); }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    check_pool_input(name(), "input", x, loc);
    check_avg_params(name(), a_, loc);
    const Size2 out =
        check_pool_params(name(), a_.p, x.dim_size(-2), x.dim_size(-1), x.describe(), loc);
    return {{with_spatial(x.shape(), out.h, out.w), x.dtype(), x.device()}};
  }

  Saves saves() const override { return {false, false}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Shape& xs = ctx.input_metas[0].shape;
    return {avg_pool2d_backward(ctx.grads[0], {xs[xs.size() - 2], xs.back()}, a_.p.kernel,
                                avg_options(a_))};
  }

 private:
  AvgParams a_;
};

class AdaptiveAvgPool2dOp final : public Op {
 public:
  explicit AdaptiveAvgPool2dOp(Size2 output_size) : output_size_(output_size) {}
  const char* name() const override { return "adaptive_avg_pool2d"; }
  nlohmann::json attrs() const override { return {{"output_size", pair_json(output_size_)}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    check_pool_input(name(), "input", x, loc);
    if (output_size_.h <= 0 || output_size_.w <= 0)
      fail(name(), loc, "expected a positive output_size, but got [{}, {}] for input {}",
           output_size_.h, output_size_.w, x.describe());
    return {{with_spatial(x.shape(), output_size_.h, output_size_.w), x.dtype(), x.device()}};
  }

  Saves saves() const override { return {false, false}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Shape& xs = ctx.input_metas[0].shape;
    return {adaptive_avg_pool2d_backward(ctx.grads[0], {xs[xs.size() - 2], xs.back()})};
  }

 private:
  Size2 output_size_;
};

template <bool kWithIndices>
OpPtr make_max_pool(const Attrs& a) {
  return std::make_shared<const MaxPool2dOp>(max_from_json(a), kWithIndices);
}
// Both names output the indices too (the gradient reads them); max_pool2d() returns the first.
KILN_REGISTER_OP("max_pool2d", (OpSchema{{"input"}, {"output", "indices"}, AutocastPolicy::kKeep}),
                 make_max_pool<false>);
KILN_REGISTER_OP("max_pool2d_with_indices",
                 (OpSchema{{"input"}, {"output", "indices"}, AutocastPolicy::kKeep}),
                 make_max_pool<true>);
KILN_REGISTER_OP("avg_pool2d", (OpSchema{{"input"}, {"output"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const AvgPool2dOp>(avg_from_json(a));
                 });
KILN_REGISTER_OP("adaptive_avg_pool2d", (OpSchema{{"input"}, {"output"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const AdaptiveAvgPool2dOp>(
                       pair_from_json(a, "output_size"));
                 });

}  // namespace

const detail::PoolParams& detail::max_pool_attrs(const Op& op) {
  const auto* m = dynamic_cast<const MaxPool2dOp*>(&op);
  KILN_INTERNAL_ASSERT(m != nullptr, std::string("max_pool_attrs of op '") + op.name() + "'");
  return m->params();
}

const detail::AvgParams& detail::avg_pool_attrs(const Op& op) {
  const auto* a = dynamic_cast<const AvgPool2dOp*>(&op);
  KILN_INTERNAL_ASSERT(a != nullptr, std::string("avg_pool_attrs of op '") + op.name() + "'");
  return a->params();
}

namespace {

std::vector<Tensor> run_max_pool(const Tensor& input, Size2 kernel_size,
                                 const MaxPool2dOptions& options, bool return_indices,
                                 const Loc& loc) {
  auto op = std::make_shared<const MaxPool2dOp>(max_params(kernel_size, options), return_indices);
  return dispatch(op, {input}, loc);
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Size2 kernel_size,
                                                  const MaxPool2dOptions& options, const Loc& loc) {
  std::vector<Tensor> out = run_max_pool(input, kernel_size, options, true, loc);
  return {out[0], out[1]};
}

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, const MaxPool2dOptions& options,
                  const Loc& loc) {
  return run_max_pool(input, kernel_size, options, false, loc)[0];
}

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, const AvgPool2dOptions& options,
                  const Loc& loc) {
  return call_op<AvgPool2dOp>({input}, loc, avg_params(kernel_size, options));
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size, const Loc& loc) {
  return call_op<AdaptiveAvgPool2dOp>({input}, loc, output_size);
}

}  // namespace kiln
