// The gradients of the pooling ops, as ops of their own so that they are differentiable too:
// max_pool2d_backward scatters to the argmax positions (its own gradient gathers from them), and
// the average poolings' backward ops are their transposes (their gradients are the poolings). The
// kernels are in kiln/backend/cpu/pool_ops.cpp (Note [kernel table]).
#include <fmt/format.h>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/pool.h"
#include "kiln/ops/pool_ops.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

using detail::avg_from_json;
using detail::avg_json;
using detail::avg_options;
using detail::avg_params;
using detail::AvgParams;
using detail::check_avg_params;
using detail::check_grad_spatial;
using detail::check_input_size;
using detail::check_pool_input;
using detail::check_pool_params;
using detail::pair_from_json;
using detail::pair_json;
using detail::with_spatial;

class MaxPool2dBackwardOp final : public Op {
 public:
  explicit MaxPool2dBackwardOp(Size2 input_size) : input_size_(input_size) {}
  const char* name() const override { return "max_pool2d_backward"; }
  nlohmann::json attrs() const override { return {{"input_size", pair_json(input_size_)}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &grad = in[0], &indices = in[1];
    check_pool_input(name(), "grad", grad, loc);
    check_input_size(name(), input_size_, loc);
    if (indices.dtype() != DType::Int64 || indices.shape() != grad.shape())
      fail(name(), loc, "expected int64 indices of the grad's shape {}, but got {}",
           shape_str(grad.shape()), indices.describe());
    return {
        {with_spatial(grad.shape(), input_size_.h, input_size_.w), grad.dtype(), grad.device()}};
  }

  // The gradient with respect to grad picks u at every index (a gather); indices get none.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    const Tensor& indices = ctx.inputs[1];
    const Tensor picked = gather(flatten(ctx.grads[0], -2), -1, flatten(indices, -2));
    return {reshape(picked, ctx.sizes_of(0)), Tensor()};
  }

 private:
  Size2 input_size_;
};

class AvgPool2dBackwardOp final : public Op {
 public:
  AvgPool2dBackwardOp(Size2 input_size, AvgParams a) : input_size_(input_size), a_(std::move(a)) {}
  const AvgParams& params() const { return a_; }
  const char* name() const override { return "avg_pool2d_backward"; }
  nlohmann::json attrs() const override {
    nlohmann::json j = avg_json(a_);
    j["input_size"] = pair_json(input_size_);
    return j;
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& grad = in[0];
    check_pool_input(name(), "grad", grad, loc);
    check_input_size(name(), input_size_, loc);
    check_avg_params(name(), a_, loc);
    const std::string operand = fmt::format("input size {}x{}", input_size_.h, input_size_.w);
    check_grad_spatial(name(), grad,
                       check_pool_params(name(), a_.p, input_size_.h, input_size_.w, operand, loc),
                       loc);
    return {
        {with_spatial(grad.shape(), input_size_.h, input_size_.w), grad.dtype(), grad.device()}};
  }

  Saves saves() const override { return {false, false}; }

  // Average pooling is linear, and this op is its transpose: the transpose of it is the pooling.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    return {avg_pool2d(ctx.grads[0], a_.p.kernel, avg_options(a_))};
  }

 private:
  Size2 input_size_;
  AvgParams a_;
};

class AdaptiveAvgPool2dBackwardOp final : public Op {
 public:
  explicit AdaptiveAvgPool2dBackwardOp(Size2 input_size) : input_size_(input_size) {}
  const char* name() const override { return "adaptive_avg_pool2d_backward"; }
  nlohmann::json attrs() const override { return {{"input_size", pair_json(input_size_)}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& grad = in[0];
    check_pool_input(name(), "grad", grad, loc);
    check_input_size(name(), input_size_, loc);
    return {
        {with_spatial(grad.shape(), input_size_.h, input_size_.w), grad.dtype(), grad.device()}};
  }

  Saves saves() const override { return {false, false}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Shape& gs = ctx.input_metas[0].shape;
    return {adaptive_avg_pool2d(ctx.grads[0], {gs[gs.size() - 2], gs.back()})};
  }

 private:
  Size2 input_size_;
};

KILN_REGISTER_OP("max_pool2d_backward",
                 (OpSchema{{"grad_output", "indices"}, {"grad_input"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const MaxPool2dBackwardOp>(
                       pair_from_json(a, "input_size"));
                 });
KILN_REGISTER_OP("avg_pool2d_backward",
                 (OpSchema{{"grad_output"}, {"grad_input"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const AvgPool2dBackwardOp>(
                       pair_from_json(a, "input_size"), avg_from_json(a));
                 });
KILN_REGISTER_OP("adaptive_avg_pool2d_backward",
                 (OpSchema{{"grad_output"}, {"grad_input"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const AdaptiveAvgPool2dBackwardOp>(
                       pair_from_json(a, "input_size"));
                 });

}  // namespace

const detail::AvgParams& detail::avg_pool_backward_attrs(const Op& op) {
  const auto* a = dynamic_cast<const AvgPool2dBackwardOp*>(&op);
  KILN_INTERNAL_ASSERT(a != nullptr,
                       std::string("avg_pool_backward_attrs of op '") + op.name() + "'");
  return a->params();
}

void detail::fail_max_pool_indices(const Op& op, const Tensor& indices, int64_t bad, int64_t h,
                                   int64_t w) {
  fail(op.name(), kernel_call_site(),
       "expected indices in [0, {}) (flat positions in a {}x{} plane), but got {} at position {} "
       "of indices {}",
       h * w, h, w, indices.to_vector<int64_t>()[bad], bad, indices.describe());
}

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, Size2 input_size,
                           const Loc& loc) {
  return call_op<MaxPool2dBackwardOp>({grad, indices}, loc, input_size);
}

Tensor avg_pool2d_backward(const Tensor& grad, Size2 input_size, Size2 kernel_size,
                           const AvgPool2dOptions& options, const Loc& loc) {
  return call_op<AvgPool2dBackwardOp>({grad}, loc, input_size, avg_params(kernel_size, options));
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad, Size2 input_size, const Loc& loc) {
  return call_op<AdaptiveAvgPool2dBackwardOp>({grad}, loc, input_size);
}

}  // namespace kiln
