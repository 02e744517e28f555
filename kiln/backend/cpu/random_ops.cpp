// CPU kernel of the random factory ops rand, randn, randint and bernoulli (Note [kernel table]):
// draws from a private generator set to the (seed, offset) in the op's attributes (Note [random
// ops]). The definitions (attributes, infer, the public functions) are in
// kiln/ops/random_factories.cpp.
#include <type_traits>
#include <vector>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/parallel.h"
#include "kiln/core/rng.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/random_ops.h"

namespace kiln {

namespace {

using detail::Dist;
using detail::Draw;

// The largest value of a 16-bit float type below 1: rounding a float32 uniform such as
// 0.9999 to float16 gives exactly 1, which rand must never return.
template <class T>
T below_one() {
  T one(1.0f);
  one.bits = static_cast<uint16_t>(one.bits - 1);
  return one;
}

template <class T>
constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

void fill(Dist dist, const Tensor& t, const Draw& d) {
  const int64_t n = t.numel();
  if (n == 0) return;
  Generator gen(d.seed);
  gen.set_offset(d.offset);
  const Loc loc = kernel_call_site();
  if (dist == Dist::kBernoulli) {
    // bool is one byte holding 0 or 1, exactly what fill_bernoulli writes.
    fill_bernoulli(static_cast<uint8_t*>(t.raw_data()), n, d.p, gen, loc);
    return;
  }
  if (dist == Dist::kRandint) {
    if (t.dtype() == DType::Int64) {
      fill_randint(t.data<int64_t>(), n, d.low, d.high, gen, loc);
      return;
    }
    std::vector<int64_t> buf(static_cast<size_t>(n));
    fill_randint(buf.data(), n, d.low, d.high, gen, loc);
    Tensor src = tensor(buf, t.shape());
    copy_into(t, src);
    return;
  }
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* p = static_cast<T*>(t.raw_data());
      if (dist == Dist::kUniform)
        fill_uniform(p, n, T(0), T(1), gen, loc);
      else
        fill_normal(p, n, T(0), T(1), gen, loc);
    } else if constexpr (is_16bit_float<T>) {
      std::vector<float> buf(static_cast<size_t>(n));
      if (dist == Dist::kUniform)
        fill_uniform(buf.data(), n, 0.0f, 1.0f, gen, loc);
      else
        fill_normal(buf.data(), n, 0.0f, 1.0f, gen, loc);
      const T top = below_one<T>();
      const bool uniform = dist == Dist::kUniform;
      T* p = static_cast<T*>(t.raw_data());
      parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          T v(buf[static_cast<size_t>(i)]);
          p[i] = uniform && static_cast<float>(v) >= 1.0f ? top : v;
        }
      });
    } else {
      KILN_INTERNAL_ASSERT(false, "a floating random fill reached a non-floating dtype");
    }
  });
}

void random_kernel(const Op& op, const std::vector<Tensor>&, const std::vector<Tensor>& out) {
  const detail::RandomAttrs& a = detail::random_attrs(op);
  fill(a.dist, out[0], a.draw);
}

KILN_REGISTER_KERNEL("rand", DeviceType::CPU, random_kernel);
KILN_REGISTER_KERNEL("randn", DeviceType::CPU, random_kernel);
KILN_REGISTER_KERNEL("randint", DeviceType::CPU, random_kernel);
KILN_REGISTER_KERNEL("bernoulli", DeviceType::CPU, random_kernel);

}  // namespace

}  // namespace kiln
