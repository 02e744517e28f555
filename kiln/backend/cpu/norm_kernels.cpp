// Batch-norm kernels. Note [batch-norm kernels]: a channel's data is P rows of R contiguous
// elements, strided by Q * R. Threads take whole channels; each channel makes its passes (the
// statistics, then the output) back to back, so the second pass mostly reads what the first left
// in cache. Sums accumulate in double: in float32 every row is summed in eight double lanes (AVX2)
// whose split depends only on R, then rows are added in order, so the result is the same for any
// thread count. Other dtypes take the scalar loops.
#include "kiln/backend/cpu/norm_kernels.h"

#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/parallel.h"

namespace kiln {
namespace detail {

namespace {

// Horizontal sum of two double accumulators, in a fixed order.
double hsum(__m256d a, __m256d b) {
  alignas(32) double l[4];
  _mm256_store_pd(l, _mm256_add_pd(a, b));
  return (l[0] + l[1]) + (l[2] + l[3]);
}

__m256d lo_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
__m256d hi_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

// Σ x over one row.
template <class T>
double row_sum(const T* x, int64_t n) {
  double s = 0;
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      a = _mm256_add_pd(a, lo_pd(v));
      b = _mm256_add_pd(b, hi_pd(v));
    }
    s = hsum(a, b);
  }
  for (; i < n; ++i) s += static_cast<double>(static_cast<compute_t<T>>(x[i]));
  return s;
}

// Σ (x - mean)^2 over one row.
template <class T>
double row_sq_dev(const T* x, int64_t n, double mean) {
  double s = 0;
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __m256d m = _mm256_set1_pd(mean);
    __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m256d d0 = _mm256_sub_pd(lo_pd(v), m), d1 = _mm256_sub_pd(hi_pd(v), m);
      a = _mm256_fmadd_pd(d0, d0, a);
      b = _mm256_fmadd_pd(d1, d1, b);
    }
    s = hsum(a, b);
  }
  for (; i < n; ++i) {
    const double d = static_cast<double>(static_cast<compute_t<T>>(x[i])) - mean;
    s += d * d;
  }
  return s;
}

// Σ g and Σ g * (x - mean) over one row.
template <class T>
void row_grad_sums(const T* g, const T* x, int64_t n, double mean, double& sg, double& sgd) {
  double s0 = 0, s1 = 0;
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __m256d m = _mm256_set1_pd(mean);
    __m256d a0 = _mm256_setzero_pd(), b0 = _mm256_setzero_pd();
    __m256d a1 = _mm256_setzero_pd(), b1 = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
      const __m256 gv = _mm256_loadu_ps(g + i), xv = _mm256_loadu_ps(x + i);
      const __m256d g0 = lo_pd(gv), g1 = hi_pd(gv);
      a0 = _mm256_add_pd(a0, g0);
      b0 = _mm256_add_pd(b0, g1);
      a1 = _mm256_fmadd_pd(g0, _mm256_sub_pd(lo_pd(xv), m), a1);
      b1 = _mm256_fmadd_pd(g1, _mm256_sub_pd(hi_pd(xv), m), b1);
    }
    s0 = hsum(a0, b0);
    s1 = hsum(a1, b1);
  }
  for (; i < n; ++i) {
    const double gi = static_cast<double>(static_cast<compute_t<T>>(g[i]));
    s0 += gi;
    s1 += gi * (static_cast<double>(static_cast<compute_t<T>>(x[i])) - mean);
  }
  sg += s0;
  sgd += s1;
}

// y = x * scale + shift over one row, in the compute type.
template <class T>
void row_affine(const T* x, T* y, int64_t n, double scale, double shift) {
  using C = compute_t<T>;
  const C sc = static_cast<C>(scale), sh = static_cast<C>(shift);
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __m256 a = _mm256_set1_ps(sc), b = _mm256_set1_ps(sh);
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), a, b));
  }
  // std::fma, as the vector loop: the same rounding for every element and every build (an
  // unoptimized build would not contract x * sc + sh into one instruction).
  for (; i < n; ++i) y[i] = static_cast<T>(std::fma(static_cast<C>(x[i]), sc, sh));
}

// y = (x - mean) * scale + bias over one row, in the compute type. Note [normalizing a row]:
// subtracting the mean first (rather than folding it into a shift, x * scale + (bias - mean *
// scale)) makes a row of equal values give exactly bias: mean rounds to x itself (the sum is
// exact in double), so x - mean is 0; the folded shift left ~1e-4 in float32 (as PyTorch does not).
template <class T>
void row_normalize(const T* x, T* y, int64_t n, double mean, double scale, double bias) {
  using C = compute_t<T>;
  const C m = static_cast<C>(mean), sc = static_cast<C>(scale), b = static_cast<C>(bias);
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __m256 vm = _mm256_set1_ps(m), va = _mm256_set1_ps(sc), vb = _mm256_set1_ps(b);
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), va, vb));
  }
  for (; i < n; ++i) y[i] = static_cast<T>(std::fma(static_cast<C>(x[i]) - m, sc, b));
}

// gx = g * alpha + (x - mean) * beta + c0 over one row, in the compute type.
template <class T>
void row_grad(const T* g, const T* x, T* gx, int64_t n, double alpha, double mean, double beta,
              double c0) {
  using C = compute_t<T>;
  const C al = static_cast<C>(alpha), m = static_cast<C>(mean), be = static_cast<C>(beta),
          c = static_cast<C>(c0);
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __m256 va = _mm256_set1_ps(al), vm = _mm256_set1_ps(m), vb = _mm256_set1_ps(be),
                 vc = _mm256_set1_ps(c);
    for (; i + 8 <= n; i += 8) {
      const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
      const __m256 r = _mm256_fmadd_ps(d, vb, vc);
      _mm256_storeu_ps(gx + i, _mm256_fmadd_ps(_mm256_loadu_ps(g + i), va, r));
    }
  }
  for (; i < n; ++i)
    gx[i] = static_cast<T>(static_cast<C>(g[i]) * al + ((static_cast<C>(x[i]) - m) * be + c));
}

template <class T>
const T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr;
}
template <class T>
T* mut(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}
template <class T>
double value(const T* p, int64_t i, double fallback) {
  return p ? static_cast<double>(static_cast<compute_t<T>>(p[i])) : fallback;
}

// Calls f(TypeTag<T>) for the floating dtypes.
template <class F>
void visit_floating(DType dt, F&& f) {
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) f(tag);
  });
}

}  // namespace

void batch_norm_forward_kernel(const BatchGeom& g, double eps, const Tensor& x,
                               const Tensor& weight, const Tensor& bias, const Tensor& y,
                               const Tensor& mean, const Tensor& var) {
  const double count = static_cast<double>(g.p * g.r);
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = ptr<T>(x), *pw = ptr<T>(weight), *pb = ptr<T>(bias);
    T* py = mut<T>(y);
    parallel_for(0, g.q, 1, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        double s = 0, ss = 0;
        for (int64_t p = 0; p < g.p; ++p) s += row_sum(px + (p * g.q + q) * g.r, g.r);
        const double m = s / count;
        for (int64_t p = 0; p < g.p; ++p) ss += row_sq_dev(px + (p * g.q + q) * g.r, g.r, m);
        const double v = ss / count;
        mut<T>(mean)[q] = static_cast<T>(m);
        mut<T>(var)[q] = static_cast<T>(v);
        const double scale = value(pw, q, 1.0) / std::sqrt(v + eps);
        for (int64_t p = 0; p < g.p; ++p) {
          const int64_t o = (p * g.q + q) * g.r;
          row_normalize(px + o, py + o, g.r, m, scale, value(pb, q, 0.0));
        }
      }
    });
  });
}

void chunk_norm_forward_kernel(const ChunkGeom& g, double eps, const Tensor& x,
                               const Tensor& weight, const Tensor& bias, const Tensor& y,
                               const Tensor& mean, const Tensor& var) {
  const int64_t chunk = g.cg * g.r;
  const double count = static_cast<double>(chunk);
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = ptr<T>(x), *pw = ptr<T>(weight), *pb = ptr<T>(bias);
    T* py = mut<T>(y);
    // Chunks go to threads; each chunk is serial.
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(chunk, 1));
    parallel_for(0, g.chunks, grain, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        const T* xs = px + s * chunk;
        const double m = row_sum(xs, chunk) / count;
        const double v = row_sq_dev(xs, chunk, m) / count;
        mut<T>(mean)[s] = static_cast<T>(m);
        mut<T>(var)[s] = static_cast<T>(v);
        const double rstd = 1.0 / std::sqrt(v + eps);
        for (int64_t c = 0; c < g.cg; ++c) {
          const int64_t q = (s % g.groups) * g.cg + c;
          const double scale = rstd * value(pw, q, 1.0);
          row_normalize(xs + c * g.r, py + s * chunk + c * g.r, g.r, m, scale, value(pb, q, 0.0));
        }
      }
    });
  });
}

void channel_affine_kernel(const BatchGeom& g, const Tensor& x, const Tensor& scale,
                           const Tensor& shift, const Tensor& y) {
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = ptr<T>(x), *ps = ptr<T>(scale), *pb = ptr<T>(shift);
    T* py = mut<T>(y);
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(g.r, 1));
    parallel_for(0, g.p * g.q, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        const int64_t q = row % g.q;
        row_affine(px + row * g.r, py + row * g.r, g.r, value(ps, q, 1.0), value(pb, q, 0.0));
      }
    });
  });
}

void channel_affine_last_kernel(int64_t rows, int64_t channels, const Tensor& x,
                                const Tensor& scale, const Tensor& shift, const Tensor& y) {
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T *px = ptr<T>(x), *ps = ptr<T>(scale), *pb = ptr<T>(shift);
    T* py = mut<T>(y);
    // The per-channel factors in the compute type, as row_affine rounds them.
    std::vector<C> sc(static_cast<size_t>(channels)), sh(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      sc[c] = static_cast<C>(value(ps, c, 1.0));
      sh[c] = static_cast<C>(value(pb, c, 0.0));
    }
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(channels, 1));
    parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        const T* xr = px + row * channels;
        T* yr = py + row * channels;
        int64_t c = 0;
        if constexpr (std::is_same_v<T, float>) {
          for (; c + 8 <= channels; c += 8)
            _mm256_storeu_ps(
                yr + c, _mm256_fmadd_ps(_mm256_loadu_ps(xr + c), _mm256_loadu_ps(sc.data() + c),
                                        _mm256_loadu_ps(sh.data() + c)));
        }
        for (; c < channels; ++c)
          yr[c] = static_cast<T>(std::fma(static_cast<C>(xr[c]), sc[c], sh[c]));
      }
    });
  });
}

// With xhat = (x - mean) * rstd, gxhat = g * w, n elements per channel, and gm / gv the
// gradients reaching the mean / var outputs:
//   gx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat)) + gm / n + 2 gv (x - mean) / n
//      = g * alpha + (x - mean) * beta + c0
// with alpha = rstd * w, beta = 2 gv / n - rstd^3 w Σ g (x - mean) / n and
// c0 = gm / n - rstd w Σ g / n; grad_weight = rstd Σ g (x - mean) and grad_bias = Σ g.
void batch_norm_backward_kernel(const BatchGeom& g, double eps, const Tensor& grad_out,
                                const Tensor& x, const Tensor& mean, const Tensor& var,
                                const Tensor& weight, const Tensor& grad_mean,
                                const Tensor& grad_var, const Tensor& grad_input,
                                const Tensor& grad_weight, const Tensor& grad_bias) {
  const double n = static_cast<double>(g.p * g.r);
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pg = ptr<T>(grad_out), *px = ptr<T>(x), *pw = ptr<T>(weight);
    const T *pgm = ptr<T>(grad_mean), *pgv = ptr<T>(grad_var);
    T* pgx = mut<T>(grad_input);
    parallel_for(0, g.q, 1, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const double m = value(ptr<T>(mean), q, 0.0);
        const double rstd = 1.0 / std::sqrt(value(ptr<T>(var), q, 0.0) + eps);
        double sg = 0, sgd = 0;
        for (int64_t p = 0; p < g.p; ++p) {
          const int64_t o = (p * g.q + q) * g.r;
          row_grad_sums(pg + o, px + o, g.r, m, sg, sgd);
        }
        if (T* gw = mut<T>(grad_weight)) gw[q] = static_cast<T>(sgd * rstd);
        if (T* gb = mut<T>(grad_bias)) gb[q] = static_cast<T>(sg);
        if (!pgx) continue;
        const double w = value(pw, q, 1.0);
        const double alpha = rstd * w;
        const double beta = 2.0 * value(pgv, q, 0.0) / n - rstd * rstd * rstd * w * sgd / n;
        const double c0 = value(pgm, q, 0.0) / n - rstd * w * sg / n;
        for (int64_t p = 0; p < g.p; ++p) {
          const int64_t o = (p * g.q + q) * g.r;
          row_grad(pg + o, px + o, pgx + o, g.r, alpha, m, beta, c0);
        }
      }
    });
  });
}

}  // namespace detail
}  // namespace kiln
