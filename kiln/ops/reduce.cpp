// Reductions: the primitive ops (sum, prod, max, min, argmax, argmin), whose CPU kernels are in
// kiln/backend/cpu/reduce_ops.cpp (Note [kernel table]), and the composites mean and sum_to.
// var/std/logsumexp/norm live in reduce_stats.cpp.
#include "kiln/ops/reduce.h"

#include <functional>

#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce_ops.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

using detail::ArgReduceAttrs;
using detail::ReduceAttrs;
using detail::ReduceDims;

// Gradient-side re-normalization: inputs already passed infer, so errors cannot happen here.
ReduceDims dims_of(const TensorMeta& m, const Dims& dims, bool keepdim) {
  return detail::normalize_reduce_dims(m.shape, dims, keepdim);
}

nlohmann::json reduce_json(const ReduceAttrs& a) {
  return {{"dims", a.dims}, {"keepdim", a.keepdim}};
}

DType sum_dtype(DType dt) {
  return is_floating(dt) ? dt : DType::Int64;
}

void require_nonempty(const char* op, const Tensor& x, const ReduceDims& rd, const Loc& loc) {
  for (int64_t d : rd.dims)
    if (x.shape()[d] == 0)
      fail(op, loc, "expected reduced dims of non-zero size, but got dim {} of size 0 in {}", d,
           x.describe());
}

// The ops of dims + keepdim (sum, prod, max, min), so that reduce_attrs() takes one cast.
class ReduceOp : public Op {
 public:
  explicit ReduceOp(ReduceAttrs a) : a_(std::move(a)) {}
  const ReduceAttrs& reduce_attrs() const { return a_; }
  nlohmann::json attrs() const override { return reduce_json(a_); }

 protected:
  ReduceAttrs a_;
};

class SumOp final : public ReduceOp {
 public:
  SumOp(Dims dims, bool keepdim) : ReduceOp({std::move(dims), keepdim}) {}
  const char* name() const override { return "sum"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], a_.dims, a_.keepdim, loc);
    return {{rd.out_shape, sum_dtype(in[0].dtype()), in[0].device()}};
  }

  Saves saves() const override { return {false, false}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const TensorMeta& m = ctx.input_metas[0];
    ReduceDims rd = dims_of(m, a_.dims, a_.keepdim);
    return {expand(detail::unsqueeze_reduced(ctx.grads[0], rd), ctx.sizes_of(0))};
  }
};

class ProdOp final : public ReduceOp {
 public:
  ProdOp(Dims dims, bool keepdim) : ReduceOp({std::move(dims), keepdim}) {}
  const char* name() const override { return "prod"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], a_.dims, a_.keepdim, loc);
    return {{rd.out_shape, sum_dtype(in[0].dtype()), in[0].device()}};
  }

  // Note [prod gradient with zeros]: d prod / d x_i = prod of the others, which y / x_i gives only
  // when no x is zero. With one zero in a group, only that zero gets a gradient (the product of
  // the non-zeros); with two or more, every gradient is zero. Built from where() so that it is
  // itself differentiable.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Tensor& x = ctx.inputs[0];
    ReduceDims rd = dims_of(ctx.input_metas[0], a_.dims, a_.keepdim);
    Tensor g = detail::unsqueeze_reduced(ctx.grads[0], rd);
    Tensor zero = eq(x, 0.0);
    Tensor nonzero_x = where(zero, 1.0, x);
    Tensor p = prod(nonzero_x, rd.dims, true);
    Tensor zeros_in_group = sum(zero, rd.dims, true);
    Tensor factor = where(eq(zeros_in_group, 0.0), div(p, nonzero_x),
                          where(logical_and(eq(zeros_in_group, 1.0), zero), p, 0.0));
    return {mul(g, factor)};
  }
};

template <bool kMax>
class ExtremumOp final : public ReduceOp {
 public:
  ExtremumOp(Dims dims, bool keepdim) : ReduceOp({std::move(dims), keepdim}) {}
  const char* name() const override { return kMax ? "max" : "min"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], a_.dims, a_.keepdim, loc);
    require_nonempty(name(), in[0], rd, loc);
    return {{rd.out_shape, in[0].dtype(), in[0].device()}};
  }

  Saves saves() const override { return {true, true}; }

  // The gradient is shared evenly among tied extrema, like torch.amax.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Tensor& x = ctx.inputs[0];
    ReduceDims rd = dims_of(ctx.input_metas[0], a_.dims, a_.keepdim);
    Tensor g = detail::unsqueeze_reduced(ctx.grads[0], rd);
    Tensor y = detail::unsqueeze_reduced(ctx.outputs[0], rd);
    Tensor mask = to_dtype(eq(x, y), x.dtype());
    return {div(mul(g, mask), sum(mask, rd.dims, true))};
  }
};

// argmax and argmin, so that arg_reduce_attrs() takes one cast.
class ArgReduceOp : public Op {
 public:
  explicit ArgReduceOp(ArgReduceAttrs a) : a_(a) {}
  const ArgReduceAttrs& arg_reduce_attrs() const { return a_; }

 protected:
  ArgReduceAttrs a_;
};

template <bool kMax>
class ArgExtremumOp final : public ArgReduceOp {
 public:
  ArgExtremumOp(std::optional<int64_t> dim, bool keepdim) : ArgReduceOp({dim, keepdim}) {}
  const char* name() const override { return kMax ? "argmax" : "argmin"; }
  nlohmann::json attrs() const override {
    return {{"dim", a_.dim ? nlohmann::json(*a_.dim) : nlohmann::json()}, {"keepdim", a_.keepdim}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    ReduceDims rd = detail::arg_reduce_dims(name(), a_, in[0], loc);
    if (in[0].numel() == 0 && !a_.dim)
      fail(name(), loc, "expected a non-empty input when no dim is given, but got {}",
           in[0].describe());
    require_nonempty(name(), in[0], rd, loc);
    return {{rd.out_shape, DType::Int64, in[0].device()}};
  }

  bool differentiable() const override { return false; }
};

template <class O>
OpFactory reduce_op() {
  return [](const Attrs& a) -> OpPtr {
    return std::make_shared<const O>(a.ints("dims"), a.b("keepdim"));
  };
}
template <class O>
OpFactory arg_op() {
  return [](const Attrs& a) -> OpPtr {
    return std::make_shared<const O>(a.opt_i("dim"), a.b("keepdim"));
  };
}
// sum and prod accumulate, so they run in float32 under autocast; max, min and their arguments
// are exact in any dtype.
const OpSchema kReduceSchema{{"x"}, {"y"}, AutocastPolicy::kFloat32};
const OpSchema kExtremumSchema{{"x"}, {"y"}, AutocastPolicy::kKeep};
KILN_REGISTER_OP("sum", kReduceSchema, reduce_op<SumOp>());
KILN_REGISTER_OP("prod", kReduceSchema, reduce_op<ProdOp>());
KILN_REGISTER_OP("max", kExtremumSchema, reduce_op<ExtremumOp<true>>());
KILN_REGISTER_OP("min", kExtremumSchema, reduce_op<ExtremumOp<false>>());
KILN_REGISTER_OP("argmax", kExtremumSchema, arg_op<ArgExtremumOp<true>>());
KILN_REGISTER_OP("argmin", kExtremumSchema, arg_op<ArgExtremumOp<false>>());

}  // namespace

const detail::ReduceAttrs& detail::reduce_attrs(const Op& op) {
  const auto* o = dynamic_cast<const ReduceOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("reduce_attrs of op '") + op.name() + "'");
  return o->reduce_attrs();
}

const detail::ArgReduceAttrs& detail::arg_reduce_attrs(const Op& op) {
  const auto* o = dynamic_cast<const ArgReduceOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("arg_reduce_attrs of op '") + op.name() + "'");
  return o->arg_reduce_attrs();
}

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  return call_op<SumOp>({x}, loc, dims, keepdim);
}

Tensor prod(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  return call_op<ProdOp>({x}, loc, dims, keepdim);
}

Tensor max(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  return call_op<ExtremumOp<true>>({x}, loc, dims, keepdim);
}

Tensor min(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  return call_op<ExtremumOp<false>>({x}, loc, dims, keepdim);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim, const Loc& loc) {
  return call_op<ArgExtremumOp<true>>({x}, loc, dim, keepdim);
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim, const Loc& loc) {
  return call_op<ArgExtremumOp<false>>({x}, loc, dim, keepdim);
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  if (!is_floating(x.dtype()))
    fail("mean", loc, "expected a floating-point input, but got {}", x.describe());
  ReduceDims rd = detail::normalize_reduce_dims("mean", x, dims, keepdim, loc);
  // The count as a size (Note [size lists]), so a traced mean divides by each call's count.
  SymInt n = 1;
  for (int64_t d : rd.dims) n = n * x.size(d);
  // 16-bit floats divide before rounding, as PyTorch does (it accumulates in float32).
  if (itemsize(x.dtype()) == 2)
    return to_dtype(div(sum(to_dtype(x, DType::Float32, loc), dims, keepdim, loc), n, loc),
                    x.dtype(), loc);
  return div(sum(x, dims, keepdim, loc), n, loc);
}

Tensor sum_to(const Tensor& x, const Shape& shape, const Loc& loc) {
  const Shape& xs = x.shape();
  if (xs == shape) return x;
  const size_t rank = xs.size();
  bool ok = shape.size() <= rank;
  const size_t lead = ok ? rank - shape.size() : 0;
  Dims dims;
  for (size_t d = 0; d < rank && ok; ++d) {
    if (d < lead) {
      dims.push_back(static_cast<int64_t>(d));
    } else if (shape[d - lead] != xs[d]) {
      ok = shape[d - lead] == 1;
      dims.push_back(static_cast<int64_t>(d));
    }
  }
  if (!ok)
    fail("sum_to", loc, "expected a shape that broadcasts to the input, but got {} for {}",
         shape_str(shape), x.describe());
  Tensor s = sum(x, dims, true, loc);
  // The leading dims are 1 now: flatten them into the first kept dim rather than reshape to
  // `shape`, so that no size is written into the graph (Note [size-free backward]).
  if (!lead) return s;
  return shape.empty() ? reshape(s, Shape{}, loc) : flatten(s, 0, static_cast<int64_t>(lead), loc);
}

}  // namespace kiln
