// SLEEF behind kiln::vmath (Note [vectorized math] in vec_math.h).
#include "kiln/backend/cpu/vec_math.h"

#include <immintrin.h>
#include <sleef.h>

#include <algorithm>

namespace kiln::vmath {

namespace {

// One lane type per element type: 8 floats or 4 doubles in an AVX register.
struct F32 {
  using T = float;
  using V = __m256;
  static constexpr int64_t kLanes = 8;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V set1(float v) { return _mm256_set1_ps(v); }
};
struct F64 {
  using T = double;
  using V = __m256d;
  static constexpr int64_t kLanes = 4;
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V set1(double v) { return _mm256_set1_pd(v); }
};

// Applies f to whole vectors; the tail is copied into a zero-padded vector, so it takes the same
// path as every other element.
template <class L, class F>
void apply(const typename L::T* x, typename L::T* y, int64_t n, F f) {
  using T = typename L::T;
  int64_t i = 0;
  for (; i + L::kLanes <= n; i += L::kLanes) L::store(y + i, f(L::load(x + i)));
  if (i < n) {
    alignas(32) T buf[L::kLanes] = {};
    const int64_t m = n - i;
    std::copy(x + i, x + n, buf);
    L::store(buf, f(L::load(buf)));
    std::copy(buf, buf + m, y + i);
  }
}

}  // namespace

#define KILN_VMATH_UNARY(name, f32fn, f64fn)                 \
  void name(const float* x, float* y, int64_t n) {           \
    apply<F32>(x, y, n, [](__m256 v) { return f32fn(v); });  \
  }                                                          \
  void name(const double* x, double* y, int64_t n) {         \
    apply<F64>(x, y, n, [](__m256d v) { return f64fn(v); }); \
  }

KILN_VMATH_UNARY(exp, Sleef_expf8_u10avx2, Sleef_expd4_u10avx2)
KILN_VMATH_UNARY(log, Sleef_logf8_u10avx2, Sleef_logd4_u10avx2)
KILN_VMATH_UNARY(log1p, Sleef_log1pf8_u10avx2, Sleef_log1pd4_u10avx2)
KILN_VMATH_UNARY(sin, Sleef_sinf8_u10avx2, Sleef_sind4_u10avx2)
KILN_VMATH_UNARY(cos, Sleef_cosf8_u10avx2, Sleef_cosd4_u10avx2)
KILN_VMATH_UNARY(tanh, Sleef_tanhf8_u10avx2, Sleef_tanhd4_u10avx2)
KILN_VMATH_UNARY(erf, Sleef_erff8_u10avx2, Sleef_erfd4_u10avx2)

#undef KILN_VMATH_UNARY

void pow(const float* x, float e, float* y, int64_t n) {
  const __m256 ve = F32::set1(e);
  apply<F32>(x, y, n, [ve](__m256 v) { return Sleef_powf8_u10avx2(v, ve); });
}
void pow(const double* x, double e, double* y, int64_t n) {
  const __m256d ve = F64::set1(e);
  apply<F64>(x, y, n, [ve](__m256d v) { return Sleef_powd4_u10avx2(v, ve); });
}

}  // namespace kiln::vmath
