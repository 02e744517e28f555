// kiln::vmath against higher-precision references (Note [vectorized math]): the error of every
// function stays within SLEEF's 1.0-ulp bound over sweeps of its domain, special values come out
// as IEEE libm gives them, and an element's result does not depend on its position or the count.
#include "kiln/backend/cpu/vec_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace kiln {
namespace {

template <class T>
using ArrayFn = std::function<void(const T*, T*, int64_t)>;

// One ulp of type T at the magnitude of ref (the gap above |ref|, at least the smallest
// subnormal).
template <class T>
long double ulp_at(long double ref) {
  const T r = static_cast<T>(std::fabs(ref));
  const T next = std::nextafter(r, std::numeric_limits<T>::infinity());
  return std::max<long double>(static_cast<long double>(next) - static_cast<long double>(r),
                               std::numeric_limits<T>::denorm_min());
}

template <class T>
struct Case {
  const char* name;
  ArrayFn<T> fn;
  std::function<long double(long double)> ref;
  T lo, hi;  // the sweep's range
};

template <class T>
std::vector<T> sweep(T lo, T hi, uint32_t seed) {
  std::vector<T> xs;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<T> uni(lo, hi);
  for (int i = 0; i < 20000; ++i) xs.push_back(uni(rng));
  // Magnitudes spread over many binades, both signs, clipped to the range.
  std::uniform_real_distribution<double> mag(-30, 30);
  for (int i = 0; i < 20000; ++i) {
    T v = static_cast<T>(std::pow(10.0, mag(rng)) * (i % 2 ? 1 : -1));
    if (v >= lo && v <= hi) xs.push_back(v);
  }
  xs.push_back(T(0));
  xs.push_back(lo);
  xs.push_back(hi);
  return xs;
}

template <class T>
void check_accuracy(const Case<T>& c, double bound) {
  const std::vector<T> xs = sweep<T>(c.lo, c.hi, 7);
  std::vector<T> ys(xs.size());
  c.fn(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
  double worst = 0;
  T worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const long double ref = c.ref(static_cast<long double>(xs[i]));
    if (!std::isfinite(static_cast<T>(ref))) {
      EXPECT_EQ(std::isnan(ys[i]), std::isnan(static_cast<T>(ref)))
          << c.name << "(" << xs[i] << ")";
      continue;
    }
    const double err =
        static_cast<double>(std::fabs(static_cast<long double>(ys[i]) - ref) / ulp_at<T>(ref));
    if (!(err <= worst)) {
      worst = err;
      worst_x = xs[i];
    }
  }
  EXPECT_LE(worst, bound) << c.name << " worst at x = " << worst_x;
  std::printf("%s %s: largest error %.3f ulp (at %g) over %zu values\n",
              sizeof(T) == 4 ? "float32" : "float64", c.name, worst, static_cast<double>(worst_x),
              xs.size());
}

TEST(VecMath, Float32WithinOneUlp) {
  using T = float;
  const std::vector<Case<T>> cases = {
      {"exp", [](const T* x, T* y, int64_t n) { vmath::exp(x, y, n); },
       [](long double v) { return std::exp(v); }, -103.f, 88.f},
      {"log", [](const T* x, T* y, int64_t n) { vmath::log(x, y, n); },
       [](long double v) { return std::log(v); }, 1e-37f, 3e38f},
      {"log1p", [](const T* x, T* y, int64_t n) { vmath::log1p(x, y, n); },
       [](long double v) { return std::log1p(v); }, -0.999f, 1e30f},
      {"sin", [](const T* x, T* y, int64_t n) { vmath::sin(x, y, n); },
       [](long double v) { return std::sin(v); }, -1e4f, 1e4f},
      {"cos", [](const T* x, T* y, int64_t n) { vmath::cos(x, y, n); },
       [](long double v) { return std::cos(v); }, -1e4f, 1e4f},
      {"tanh", [](const T* x, T* y, int64_t n) { vmath::tanh(x, y, n); },
       [](long double v) { return std::tanh(v); }, -20.f, 20.f},
      {"erf", [](const T* x, T* y, int64_t n) { vmath::erf(x, y, n); },
       [](long double v) { return std::erf(v); }, -6.f, 6.f},
      {"pow 1.7", [](const T* x, T* y, int64_t n) { vmath::pow(x, 1.7f, y, n); },
       [](long double v) { return std::pow(v, static_cast<long double>(1.7f)); }, 0.f, 1e20f},
      {"pow -0.5", [](const T* x, T* y, int64_t n) { vmath::pow(x, -0.5f, y, n); },
       [](long double v) { return std::pow(v, -0.5L); }, 1e-30f, 1e30f},
  };
  for (const Case<T>& c : cases) check_accuracy(c, 1.0 + 1e-6);
}

TEST(VecMath, Float64WithinOneUlp) {
  using T = double;
  const std::vector<Case<T>> cases = {
      {"exp", [](const T* x, T* y, int64_t n) { vmath::exp(x, y, n); },
       [](long double v) { return std::exp(v); }, -700., 700.},
      {"log", [](const T* x, T* y, int64_t n) { vmath::log(x, y, n); },
       [](long double v) { return std::log(v); }, 1e-300, 1e300},
      {"log1p", [](const T* x, T* y, int64_t n) { vmath::log1p(x, y, n); },
       [](long double v) { return std::log1p(v); }, -0.999, 1e30},
      {"sin", [](const T* x, T* y, int64_t n) { vmath::sin(x, y, n); },
       [](long double v) { return std::sin(v); }, -1e6, 1e6},
      {"cos", [](const T* x, T* y, int64_t n) { vmath::cos(x, y, n); },
       [](long double v) { return std::cos(v); }, -1e6, 1e6},
      {"tanh", [](const T* x, T* y, int64_t n) { vmath::tanh(x, y, n); },
       [](long double v) { return std::tanh(v); }, -30., 30.},
      {"erf", [](const T* x, T* y, int64_t n) { vmath::erf(x, y, n); },
       [](long double v) { return std::erf(v); }, -6., 6.},
      {"pow 1.7", [](const T* x, T* y, int64_t n) { vmath::pow(x, 1.7, y, n); },
       [](long double v) { return std::pow(v, static_cast<long double>(1.7)); }, 0., 1e100},
  };
  // long double carries 11 more bits than double, so the reference itself is off by ~1/2048 ulp.
  for (const Case<T>& c : cases) check_accuracy(c, 1.0 + 1e-3);
}

// Special values come out as C's libm defines them: bit for bit where libm's result is exact
// (infinities, zeros, ±1), NaN where it is NaN.
TEST(VecMath, SpecialValuesAsLibm) {
  using T = float;
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> xs = {0.f, -0.f, inf, -inf, nan, 1.f, -1.f, 100.f, -110.f, 1e-40f, -1e-40f};
  const std::vector<std::pair<const char*, std::pair<ArrayFn<T>, T (*)(T)>>> cases = {
      {"exp",
       {[](const T* x, T* y, int64_t n) { vmath::exp(x, y, n); }, [](T v) { return std::exp(v); }}},
      {"log",
       {[](const T* x, T* y, int64_t n) { vmath::log(x, y, n); }, [](T v) { return std::log(v); }}},
      {"log1p",
       {[](const T* x, T* y, int64_t n) { vmath::log1p(x, y, n); },
        [](T v) { return std::log1p(v); }}},
      {"tanh",
       {[](const T* x, T* y, int64_t n) { vmath::tanh(x, y, n); },
        [](T v) { return std::tanh(v); }}},
      {"erf",
       {[](const T* x, T* y, int64_t n) { vmath::erf(x, y, n); }, [](T v) { return std::erf(v); }}},
      {"sin",
       {[](const T* x, T* y, int64_t n) { vmath::sin(x, y, n); }, [](T v) { return std::sin(v); }}},
      {"cos",
       {[](const T* x, T* y, int64_t n) { vmath::cos(x, y, n); }, [](T v) { return std::cos(v); }}},
  };
  for (const auto& [name, fns] : cases) {
    std::vector<T> ys(xs.size());
    fns.first(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) {
      const T want = fns.second(xs[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(ys[i])) << name << "(" << xs[i] << ") = " << ys[i];
      } else if (std::isinf(want) || want == 0 || std::fabs(want) == 1) {
        EXPECT_EQ(std::bit_cast<uint32_t>(ys[i]), std::bit_cast<uint32_t>(want))
            << name << "(" << xs[i] << ") = " << ys[i] << ", libm " << want;
      } else {
        EXPECT_NEAR(ys[i], want, 2 * std::fabs(want) * std::numeric_limits<T>::epsilon())
            << name << "(" << xs[i] << ")";
      }
    }
  }
  // pow's special cases (C99 Annex F).
  const std::vector<std::pair<T, T>> pow_cases = {{0.f, -1.f},     {-0.f, -1.f}, {0.f, 2.5f},
                                                  {-8.f, 1.f / 3}, {1.f, nan},   {nan, 0.f},
                                                  {inf, -2.f},     {-inf, 3.f},  {2.f, 200.f}};
  for (const auto& [x, e] : pow_cases) {
    T y = 0;
    vmath::pow(&x, e, &y, 1);
    const T want = std::pow(x, e);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(y)) << "pow(" << x << ", " << e << ") = " << y;
    else
      EXPECT_EQ(std::bit_cast<uint32_t>(y), std::bit_cast<uint32_t>(want))
          << "pow(" << x << ", " << e << ") = " << y << ", libm " << want;
  }
}

// The eager kernel and a fused tile split the same elements differently; every element must
// still get the same bits: compare each element of a long call with the same element alone, for
// every count around the vector width.
TEST(VecMath, ResultDoesNotDependOnPositionOrCount) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-5.f, 5.f);
  std::vector<float> xs(41);
  for (float& v : xs) v = uni(rng);
  std::vector<double> xd(xs.begin(), xs.end());
  for (int64_t n = 1; n <= 41; ++n) {
    std::vector<float> ys(static_cast<size_t>(n));
    std::vector<double> yd(static_cast<size_t>(n));
    vmath::tanh(xs.data(), ys.data(), n);
    vmath::exp(xd.data(), yd.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      float one = 0;
      double oned = 0;
      vmath::tanh(&xs[static_cast<size_t>(i)], &one, 1);
      vmath::exp(&xd[static_cast<size_t>(i)], &oned, 1);
      EXPECT_EQ(std::bit_cast<uint32_t>(ys[static_cast<size_t>(i)]), std::bit_cast<uint32_t>(one))
          << "n " << n << " i " << i;
      EXPECT_EQ(std::bit_cast<uint64_t>(yd[static_cast<size_t>(i)]), std::bit_cast<uint64_t>(oned))
          << "n " << n << " i " << i;
    }
  }
  // In place gives what out of place gives.
  std::vector<float> out(xs.size()), in_place = xs;
  vmath::erf(xs.data(), out.data(), static_cast<int64_t>(xs.size()));
  vmath::erf(in_place.data(), in_place.data(), static_cast<int64_t>(in_place.size()));
  EXPECT_EQ(out, in_place);
}

}  // namespace
}  // namespace kiln
