// Factories: full (zeros, ones, the scalars of expressions), arange, linspace, eye, and
// tensor(values). The ops' CPU kernels are in kiln/backend/cpu/factory_ops.cpp (Note [kernel
// table]); the random factories are in random_factories.cpp.
#include "kiln/ops/factories.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/ops/factory_op.h"
#include "kiln/ops/factory_ops.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

// Note [factories are leaves]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Factories create fresh tensors from numbers, not from other tensors, so there is nothing to
// differentiate and nothing to record on the tape. Each is an op without tensor inputs
// (factory_op.h) whose attrs hold everything it needs, so modes see every tensor a program makes
// and a recorded factory rebuilds from its attrs. options.requires_grad makes the result a leaf
// that requires grad. On the meta device nothing is allocated and nothing is written, and random
// factories leave the generator untouched. tensor(values) is not an op: its values are data (a
// tracer captures them as a constant).

namespace {

TensorOptions like_options(const Tensor& like, std::optional<DType> dtype) {
  return TensorOptions{dtype.value_or(like.dtype()), like.device(), false};
}

bool is_integral_value(double v) {
  return std::isfinite(v) && std::trunc(v) == v;
}

class FullOp final : public detail::FactoryOp {
 public:
  FullOp(detail::FactorySpec spec, double value, bool wrapped)
      : FactoryOp(std::move(spec)), a_{value, wrapped} {}
  const detail::FullAttrs& full_attrs() const { return a_; }
  const char* name() const override { return "full"; }
  nlohmann::json extra_attrs() const override {
    return {{"value", attr_double(a_.value)}, {"wrapped_number", a_.wrapped}};
  }
  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>& metas) const override {
    std::vector<Tensor> out = Op::forward(in, metas);
    // A number written in an expression (x * 0.5) promotes like a Python scalar
    // (type_promotion.h); the op says so, so a replay promotes the same way.
    out[0].impl()->is_wrapped_number_ = a_.wrapped;
    return out;
  }

 private:
  detail::FullAttrs a_;
};

KILN_REGISTER_OP("full", (OpSchema{{"like?"}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const FullOp>(detail::FactorySpec::from_json(a),
                                                         a.f("value"), a.b("wrapped_number"));
                 });

}  // namespace

const detail::FullAttrs& detail::full_attrs(const Op& op) {
  const auto* f = dynamic_cast<const FullOp*>(&op);
  KILN_INTERNAL_ASSERT(f != nullptr, std::string("full_attrs of op '") + op.name() + "'");
  return f->full_attrs();
}

namespace {

Tensor run_full(const char* fn, Shape shape, double value, const TensorOptions& options,
                const Loc& loc, bool wrapped = false) {
  detail::FactorySpec spec{std::move(shape), options};
  Tensor t =
      detail::run_factory(fn, spec, std::make_shared<const FullOp>(spec, value, wrapped), loc);
  t.impl()->is_wrapped_number_ = wrapped;  // also on meta, where no kernel runs
  return t;
}

// full with like's shape (Note [like factories]).
Tensor run_full_like(const char* fn, const Tensor& like, double value, std::optional<DType> dtype,
                     const Loc& loc) {
  detail::FactorySpec spec{{}, like_options(like, dtype), true};
  return detail::run_factory(fn, spec, std::make_shared<const FullOp>(spec, value, false), loc,
                             like);
}

}  // namespace

// The factories that take a size list declare its symbolic sizes (Note [size lists]); zeros and
// ones are `full` ops.
Tensor zeros(SizeList shape, TensorOptions options, const Loc& loc) {
  const SymAttrScope sym("full", shape.sym_attrs("/shape"));
  return run_full("zeros", shape.take(), 0.0, options, loc);
}

Tensor ones(SizeList shape, TensorOptions options, const Loc& loc) {
  const SymAttrScope sym("full", shape.sym_attrs("/shape"));
  return run_full("ones", shape.take(), 1.0, options, loc);
}

Tensor full(SizeList shape, double value, TensorOptions options, const Loc& loc) {
  const SymAttrScope sym("full", shape.sym_attrs("/shape"));
  return run_full("full", shape.take(), value, options, loc);
}

Tensor detail::wrapped_number(double value, DType dtype, Device device) {
  return run_full("scalar", {}, value, {dtype, device}, Loc::current(), /*wrapped=*/true);
}

Tensor empty_like(const Tensor& like, std::optional<DType> dtype) {
  return empty(like.shape(), like_options(like, dtype));
}

Tensor zeros_like(const Tensor& like, std::optional<DType> dtype) {
  return run_full_like("zeros_like", like, 0.0, dtype, Loc::current());
}

Tensor ones_like(const Tensor& like, std::optional<DType> dtype) {
  return run_full_like("ones_like", like, 1.0, dtype, Loc::current());
}

Tensor full_like(const Tensor& like, double value, std::optional<DType> dtype) {
  return run_full_like("full_like", like, value, dtype, Loc::current());
}

Tensor scalar_tensor(double value, TensorOptions options) {
  return full(Shape{}, value, options);
}

// --- ranges ---------------------------------------------------------------------------------

namespace {

using detail::RangeKind;

// arange (start, step), linspace (start, end) and eye: values that follow from two numbers and
// the shape.
class RangeOp final : public detail::FactoryOp {
 public:
  RangeOp(RangeKind kind, detail::FactorySpec spec, double a, double b)
      : FactoryOp(std::move(spec)), a_{kind, a, b} {}
  const detail::RangeAttrs& range_attrs() const { return a_; }
  const char* name() const override {
    return a_.kind == RangeKind::kArange     ? "arange"
           : a_.kind == RangeKind::kLinspace ? "linspace"
                                             : "eye";
  }
  nlohmann::json extra_attrs() const override {
    if (a_.kind == RangeKind::kArange)
      return {{"start", attr_double(a_.a)}, {"step", attr_double(a_.b)}};
    if (a_.kind == RangeKind::kLinspace)
      return {{"start", attr_double(a_.a)}, {"end", attr_double(a_.b)}};
    return nlohmann::json::object();
  }

 private:
  detail::RangeAttrs a_;
};

KILN_REGISTER_OP("arange", (OpSchema{{}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const RangeOp>(RangeKind::kArange,
                                                          detail::FactorySpec::from_json(a),
                                                          a.f("start"), a.f("step"));
                 });
KILN_REGISTER_OP("linspace", (OpSchema{{}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const RangeOp>(RangeKind::kLinspace,
                                                          detail::FactorySpec::from_json(a),
                                                          a.f("start"), a.f("end"));
                 });
KILN_REGISTER_OP("eye", (OpSchema{{}, {"y"}, AutocastPolicy::kKeep}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const RangeOp>(RangeKind::kEye, detail::FactorySpec::from_json(a), 0.0,
                                         0.0);
});

}  // namespace

const detail::RangeAttrs& detail::range_attrs(const Op& op) {
  const auto* r = dynamic_cast<const RangeOp*>(&op);
  KILN_INTERNAL_ASSERT(r != nullptr, std::string("range_attrs of op '") + op.name() + "'");
  return r->range_attrs();
}

namespace {

Tensor run_range(const char* fn, RangeKind kind, Shape shape, const TensorOptions& options,
                 double a, double b, const Loc& loc) {
  detail::FactorySpec spec{std::move(shape), options};
  return detail::run_factory(fn, spec, std::make_shared<const RangeOp>(kind, spec, a, b), loc);
}

}  // namespace

Tensor arange(double end, std::optional<TensorOptions> options, const Loc& loc) {
  return arange(0.0, end, 1.0, options, loc);
}

// [0, n) has n elements in every dtype, so the size attr is n itself.
Tensor arange(const SymInt& end, std::optional<TensorOptions> options, const Loc& loc) {
  SymAttrs attrs;
  if (end.is_symbolic()) attrs.push_back({"/shape/0", end});
  const SymAttrScope sym("arange", std::move(attrs));
  return arange(0.0, static_cast<double>(end.hint()), 1.0, options, loc);
}

// Note [arange dtype and length]
// Without options the result is int64 when start, end and step are all integral values (as
// torch.arange(0, 5) gives int64) and float32 otherwise. Integer dtypes follow PyTorch exactly:
// start and step are truncated toward zero (arange(0.5, 3, 1, int32) is [0, 1, 2]) and a step that
// truncates to zero is an error; the length is ceil((end - start) / step) computed from the
// truncated bounds for int64 (PyTorch's accumulate type) but from the given doubles otherwise.
// Floating values are start + i * step computed in double (float for 16-bit dtypes). See
// Note [fused multiply-add in ranges].
Tensor arange(double start, double end, double step, std::optional<TensorOptions> options,
              const Loc& loc) {
  TensorOptions opts;
  if (options) {
    opts = *options;
  } else {
    bool integral = is_integral_value(start) && is_integral_value(end) && is_integral_value(step);
    opts.dtype = integral ? DType::Int64 : DType::Float32;
  }
  if (opts.dtype == DType::Bool)
    fail("arange", loc, "expected a numeric dtype, but got {}", dtype_name(opts.dtype));
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    fail("arange", loc, "expected finite start, end and step, but got start={}, end={}, step={}",
         start, end, step);
  const bool integral_dtype = !is_floating(opts.dtype);
  double xstart = integral_dtype ? std::trunc(start) : start;
  double xend = integral_dtype ? std::trunc(end) : end;
  double xstep = integral_dtype ? std::trunc(step) : step;
  if (xstep == 0)
    fail("arange", loc, "expected a nonzero step, but got step={} for dtype {}", step,
         dtype_name(opts.dtype));
  if ((xstep > 0 && xend < xstart) || (xstep < 0 && xend > xstart))
    fail("arange", loc,
         "expected end on the side of start that step points to, but got start={}, "
         "end={}, step={}",
         start, end, step);
  double size_d = opts.dtype == DType::Int64 ? std::ceil((xend - xstart) / xstep)
                                             : std::ceil((end - start) / step);
  if (!(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max() / 8)))
    fail("arange", loc,
         "expected a representable number of elements, but got {} from start={}, "
         "end={}, step={}",
         size_d, start, end, step);
  return run_range("arange", RangeKind::kArange, Shape{static_cast<int64_t>(size_d)}, opts,
                   integral_dtype ? xstart : start, integral_dtype ? xstep : step, loc);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options, const Loc& loc) {
  if (steps < 0) fail("linspace", loc, "expected steps >= 0, but got steps={}", steps);
  if (options.dtype == DType::Bool)
    fail("linspace", loc, "expected a numeric dtype, but got {}", dtype_name(options.dtype));
  return run_range("linspace", RangeKind::kLinspace, Shape{steps}, options, start, end, loc);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options, const Loc& loc) {
  int64_t cols = m.value_or(n);
  if (n < 0 || cols < 0)
    fail("eye", loc, "expected non-negative sizes, but got n={}, m={}", n, cols);
  return run_range("eye", RangeKind::kEye, Shape{n, cols}, options, 0.0, 0.0, loc);
}

// --- from values ------------------------------------------------------------------------------

template <class T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape, TensorOptions options,
              const Loc& loc) {
  const auto count = static_cast<int64_t>(values.size());
  Shape sh = shape ? *shape : Shape{count};
  for (int64_t s : sh)
    if (s < 0) fail("tensor", loc, "expected non-negative sizes, but got shape {}", shape_str(sh));
  if (shape_numel(sh) != count)
    fail("tensor", loc, "expected {} values for shape {}, but got {}", shape_numel(sh),
         shape_str(sh), count);
  Tensor t = empty(std::move(sh), options);
  if (t.is_meta() || count == 0) return t;
  visit_dtype(options.dtype, [&](auto tag) {
    using O = typename decltype(tag)::type;
    O* p = static_cast<O*>(t.raw_data());
    // An index loop rather than data(): std::vector<bool> has no contiguous buffer.
    for (size_t i = 0; i < values.size(); ++i) {
      auto v = static_cast<T>(values[i]);
      if constexpr (std::is_same_v<O, bool>)
        p[i] = v != T(0);
      else
        p[i] = static_cast<O>(static_cast<compute_t<O>>(v));
    }
  });
  return t;
}

template Tensor tensor<float>(const std::vector<float>&, std::optional<Shape>, TensorOptions,
                              const Loc&);
template Tensor tensor<double>(const std::vector<double>&, std::optional<Shape>, TensorOptions,
                               const Loc&);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, std::optional<Shape>, TensorOptions,
                                const Loc&);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, std::optional<Shape>, TensorOptions,
                                const Loc&);
template Tensor tensor<int8_t>(const std::vector<int8_t>&, std::optional<Shape>, TensorOptions,
                               const Loc&);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, std::optional<Shape>, TensorOptions,
                                const Loc&);
template Tensor tensor<bool>(const std::vector<bool>&, std::optional<Shape>, TensorOptions,
                             const Loc&);

Tensor tensor(std::initializer_list<double> values, TensorOptions options, const Loc& loc) {
  return tensor<double>(std::vector<double>(values), std::nullopt, options, loc);
}

}  // namespace kiln
