#include "kiln/ops/factories.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "kiln/ops/factory_op.h"
#include "kiln/ops/loops.h"
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

// A double converted to a storage type, 16-bit floats through float32.
template <class T>
T from_double(double v) {
  return static_cast<T>(static_cast<compute_t<T>>(v));
}

// Writes value into every element of a freshly allocated (contiguous) tensor.
void fill_contiguous(const Tensor& t, double value) {
  if (t.is_meta() || t.numel() == 0) return;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = from_double<T>(value);
    T* p = static_cast<T*>(t.raw_data());
    parallel_for(0, t.numel(), kGrain, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
  });
}

// out[i] = f(i) over a contiguous tensor of numel elements, in parallel.
template <class T, class F>
void generate(const Tensor& t, F f) {
  T* p = static_cast<T*>(t.raw_data());
  parallel_for(0, t.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = f(i);
  });
}

TensorOptions like_options(const Tensor& like, std::optional<DType> dtype) {
  return TensorOptions{dtype.value_or(like.dtype()), like.device(), false};
}

bool is_integral_value(double v) {
  return std::isfinite(v) && std::trunc(v) == v;
}

template <class T>
constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

}  // namespace

namespace {

class FullOp final : public detail::FactoryOp {
 public:
  FullOp(detail::FactorySpec spec, double value, bool wrapped)
      : FactoryOp(std::move(spec)), value_(value), wrapped_(wrapped) {}
  const char* name() const override { return "full"; }
  nlohmann::json extra_attrs() const override {
    return {{"value", attr_double(value_)}, {"wrapped_number", wrapped_}};
  }
  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>& metas) const override {
    std::vector<Tensor> out = Op::forward(in, metas);
    // A number written in an expression (x * 0.5) promotes like a Python scalar
    // (type_promotion.h); the op says so, so a replay promotes the same way.
    out[0].impl()->is_wrapped_number_ = wrapped_;
    return out;
  }
  void kernel(const std::vector<Tensor>&, const std::vector<Tensor>& out) const override {
    fill_contiguous(out[0], value_);
  }

 private:
  double value_;
  bool wrapped_;
};

KILN_REGISTER_OP("full", (OpSchema{{}, {"y"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const FullOp>(detail::FactorySpec::from_json(a), a.f("value"),
                                        a.b("wrapped_number"));
});

Tensor run_full(const char* fn, Shape shape, double value, const TensorOptions& options,
                const Loc& loc, bool wrapped = false) {
  detail::FactorySpec spec{std::move(shape), options};
  Tensor t =
      detail::run_factory(fn, spec, std::make_shared<const FullOp>(spec, value, wrapped), loc);
  t.impl()->is_wrapped_number_ = wrapped;  // also on meta, where no kernel runs
  return t;
}

}  // namespace

Tensor zeros(Shape shape, TensorOptions options, const Loc& loc) {
  return run_full("zeros", std::move(shape), 0.0, options, loc);
}

Tensor ones(Shape shape, TensorOptions options, const Loc& loc) {
  return run_full("ones", std::move(shape), 1.0, options, loc);
}

Tensor full(Shape shape, double value, TensorOptions options, const Loc& loc) {
  return run_full("full", std::move(shape), value, options, loc);
}

Tensor detail::wrapped_number(double value, DType dtype, Device device) {
  return run_full("scalar", {}, value, {dtype, device}, Loc::current(), /*wrapped=*/true);
}

Tensor empty_like(const Tensor& like, std::optional<DType> dtype) {
  return empty(like.shape(), like_options(like, dtype));
}

Tensor zeros_like(const Tensor& like, std::optional<DType> dtype) {
  return full(like.shape(), 0.0, like_options(like, dtype));
}

Tensor ones_like(const Tensor& like, std::optional<DType> dtype) {
  return full(like.shape(), 1.0, like_options(like, dtype));
}

Tensor full_like(const Tensor& like, double value, std::optional<DType> dtype) {
  return full(like.shape(), value, like_options(like, dtype));
}

Tensor scalar_tensor(double value, TensorOptions options) {
  return full(Shape{}, value, options);
}

// --- ranges ---------------------------------------------------------------------------------

namespace {

void arange_fill(const Tensor& t, double start, double step) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      const auto s = static_cast<int64_t>(start);
      const auto d = static_cast<int64_t>(step);
      generate<T>(t, [&](int64_t i) { return static_cast<T>(s + d * i); });
    } else if constexpr (is_16bit_float<T>) {
      const auto s = static_cast<float>(start);
      const auto d = static_cast<float>(step);
      generate<T>(t, [&](int64_t i) { return T(std::fma(d, static_cast<float>(i), s)); });
    } else {
      generate<T>(t, [&](int64_t i) {
        return static_cast<T>(std::fma(step, static_cast<double>(i), start));
      });
    }
  });
}

// Note [fused multiply-add in ranges]
// arange and linspace compute start + i * step with an explicit std::fma. PyTorch's x86 build
// compiles these kernels with -mfma and lets the compiler contract the expression, so fma is what
// matches it bit for bit (in its scalar loop; its vectorized chunks add j * step to a chunk base
// and can differ in the last bit). Spelling it out also keeps kiln's Debug and Release builds,
// which contract differently, in agreement.
//
// Like PyTorch, the first half counts up from start and the second half down from end, so both
// endpoints are exact and the rounding error is symmetric. The step is computed in the dtype for
// floats (float32 for 16-bit) and in double for integers, whose values are then truncated.
void linspace_fill(const Tensor& t, double start, double end) {
  const int64_t steps = t.numel();
  if (steps == 0) return;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_integral_v<T>, double, compute_t<T>>;
    const auto s = static_cast<S>(from_double<compute_t<T>>(start));
    const auto e = static_cast<S>(from_double<compute_t<T>>(end));
    const S step = steps > 1 ? (e - s) / static_cast<S>(steps - 1) : S(0);
    // PyTorch fills steps == 1 with start, which the formula below would give as end.
    const int64_t halfway = steps == 1 ? 1 : steps / 2;
    generate<T>(t, [&](int64_t i) {
      S v = i < halfway ? std::fma(step, static_cast<S>(i), s)
                        : std::fma(-step, static_cast<S>(steps - 1 - i), e);
      return static_cast<T>(v);
    });
  });
}

void eye_fill(const Tensor& t) {
  fill_contiguous(t, 0.0);
  const int64_t n = t.size(0), cols = t.size(1);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.raw_data());
    for (int64_t i = 0; i < std::min(n, cols); ++i) p[i * cols + i] = from_double<T>(1.0);
  });
}

enum class RangeKind { kArange, kLinspace, kEye };

// arange (start, step), linspace (start, end) and eye: values that follow from two numbers and
// the shape.
class RangeOp final : public detail::FactoryOp {
 public:
  RangeOp(RangeKind kind, detail::FactorySpec spec, double a, double b)
      : FactoryOp(std::move(spec)), kind_(kind), a_(a), b_(b) {}
  const char* name() const override {
    return kind_ == RangeKind::kArange     ? "arange"
           : kind_ == RangeKind::kLinspace ? "linspace"
                                           : "eye";
  }
  nlohmann::json extra_attrs() const override {
    if (kind_ == RangeKind::kArange) return {{"start", attr_double(a_)}, {"step", attr_double(b_)}};
    if (kind_ == RangeKind::kLinspace)
      return {{"start", attr_double(a_)}, {"end", attr_double(b_)}};
    return nlohmann::json::object();
  }
  void kernel(const std::vector<Tensor>&, const std::vector<Tensor>& out) const override {
    if (kind_ == RangeKind::kArange) arange_fill(out[0], a_, b_);
    if (kind_ == RangeKind::kLinspace) linspace_fill(out[0], a_, b_);
    if (kind_ == RangeKind::kEye) eye_fill(out[0]);
  }

 private:
  RangeKind kind_;
  double a_, b_;
};

KILN_REGISTER_OP("arange", (OpSchema{{}, {"y"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const RangeOp>(RangeKind::kArange, detail::FactorySpec::from_json(a),
                                         a.f("start"), a.f("step"));
});
KILN_REGISTER_OP("linspace", (OpSchema{{}, {"y"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const RangeOp>(RangeKind::kLinspace, detail::FactorySpec::from_json(a),
                                         a.f("start"), a.f("end"));
});
KILN_REGISTER_OP("eye", (OpSchema{{}, {"y"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const RangeOp>(RangeKind::kEye, detail::FactorySpec::from_json(a), 0.0,
                                         0.0);
});

Tensor run_range(const char* fn, RangeKind kind, Shape shape, const TensorOptions& options,
                 double a, double b, const Loc& loc) {
  detail::FactorySpec spec{std::move(shape), options};
  return detail::run_factory(fn, spec, std::make_shared<const RangeOp>(kind, spec, a, b), loc);
}

}  // namespace

Tensor arange(double end, std::optional<TensorOptions> options, const Loc& loc) {
  return arange(0.0, end, 1.0, options, loc);
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
