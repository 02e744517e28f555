// CPU kernels of the non-random factory ops (Note [kernel table]): full fills its output with
// one value, arange, linspace and eye generate theirs from two numbers and the shape. The
// definitions (attributes, infer, the public functions) are in kiln/ops/factories.cpp.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/factory_ops.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

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

template <class T>
constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

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
  const int64_t n = t.dim_size(0), cols = t.dim_size(1);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.raw_data());
    for (int64_t i = 0; i < std::min(n, cols); ++i) p[i * cols + i] = from_double<T>(1.0);
  });
}

void full_kernel(const Op& op, const std::vector<Tensor>&, const std::vector<Tensor>& out) {
  fill_contiguous(out[0], detail::full_attrs(op).value);
}

void range_kernel(const Op& op, const std::vector<Tensor>&, const std::vector<Tensor>& out) {
  using detail::RangeKind;
  const detail::RangeAttrs& a = detail::range_attrs(op);
  if (a.kind == RangeKind::kArange) arange_fill(out[0], a.a, a.b);
  if (a.kind == RangeKind::kLinspace) linspace_fill(out[0], a.a, a.b);
  if (a.kind == RangeKind::kEye) eye_fill(out[0]);
}

KILN_REGISTER_KERNEL("full", DeviceType::CPU, full_kernel);
KILN_REGISTER_KERNEL("arange", DeviceType::CPU, range_kernel);
KILN_REGISTER_KERNEL("linspace", DeviceType::CPU, range_kernel);
KILN_REGISTER_KERNEL("eye", DeviceType::CPU, range_kernel);

}  // namespace

}  // namespace kiln
