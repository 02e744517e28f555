// batch_norm and its gradient on channels-last float32 x (Note [channels-last training] in
// kiln/backend/onednn/conv_primitives.h). Note [channels-last batch norm]: x is `rows` (N*H*W)
// rows of `channels` contiguous elements, so a channel's elements are strided and a row holds one
// of each; the sums therefore run across channels, eight lanes at a time, into one double
// accumulator per channel. Rows are taken in fixed blocks of kBlockRows, each block summed in
// order by one thread into partial sums of its own, and the blocks' partials added in block order
// afterwards: the result depends on neither the thread count nor the partition. It is a
// different order from the NCHW kernels' (norm_kernels.cpp), so the statistics can differ from
// theirs in the last bits of a double; every element is then computed with the same float
// formula as there (fma(x - mean, scale, bias), and the gradient's fma(g, alpha, fma(x - mean,
// beta, c0))).
#include <immintrin.h>

#include <cmath>
#include <vector>

#include "kiln/backend/cpu/loops.h"
#include "kiln/backend/cpu/norm_kernels.h"
#include "kiln/core/parallel.h"

namespace kiln {
namespace detail {

namespace {

constexpr int64_t kBlockRows = 256;

__m256d lo_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
__m256d hi_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

// acc[c] += x[c] over one row.
void add_row(const float* x, int64_t channels, double* acc) {
  int64_t c = 0;
  for (; c + 8 <= channels; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    _mm256_storeu_pd(acc + c, _mm256_add_pd(_mm256_loadu_pd(acc + c), lo_pd(v)));
    _mm256_storeu_pd(acc + c + 4, _mm256_add_pd(_mm256_loadu_pd(acc + c + 4), hi_pd(v)));
  }
  for (; c < channels; ++c) acc[c] += static_cast<double>(x[c]);
}

// acc[c] += (x[c] - mean[c])^2 over one row.
void add_sq_dev_row(const float* x, int64_t channels, const double* mean, double* acc) {
  int64_t c = 0;
  for (; c + 8 <= channels; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    const __m256d d0 = _mm256_sub_pd(lo_pd(v), _mm256_loadu_pd(mean + c));
    const __m256d d1 = _mm256_sub_pd(hi_pd(v), _mm256_loadu_pd(mean + c + 4));
    _mm256_storeu_pd(acc + c, _mm256_fmadd_pd(d0, d0, _mm256_loadu_pd(acc + c)));
    _mm256_storeu_pd(acc + c + 4, _mm256_fmadd_pd(d1, d1, _mm256_loadu_pd(acc + c + 4)));
  }
  for (; c < channels; ++c) {
    const double d = static_cast<double>(x[c]) - mean[c];
    acc[c] = std::fma(d, d, acc[c]);
  }
}

// sg[c] += g[c] and sgd[c] += g[c] * (x[c] - mean[c]) over one row.
void add_grad_row(const float* g, const float* x, int64_t channels, const double* mean, double* sg,
                  double* sgd) {
  int64_t c = 0;
  for (; c + 8 <= channels; c += 8) {
    const __m256 gv = _mm256_loadu_ps(g + c), xv = _mm256_loadu_ps(x + c);
    const __m256d g0 = lo_pd(gv), g1 = hi_pd(gv);
    _mm256_storeu_pd(sg + c, _mm256_add_pd(_mm256_loadu_pd(sg + c), g0));
    _mm256_storeu_pd(sg + c + 4, _mm256_add_pd(_mm256_loadu_pd(sg + c + 4), g1));
    const __m256d d0 = _mm256_sub_pd(lo_pd(xv), _mm256_loadu_pd(mean + c));
    const __m256d d1 = _mm256_sub_pd(hi_pd(xv), _mm256_loadu_pd(mean + c + 4));
    _mm256_storeu_pd(sgd + c, _mm256_fmadd_pd(g0, d0, _mm256_loadu_pd(sgd + c)));
    _mm256_storeu_pd(sgd + c + 4, _mm256_fmadd_pd(g1, d1, _mm256_loadu_pd(sgd + c + 4)));
  }
  for (; c < channels; ++c) {
    const double gi = static_cast<double>(g[c]);
    sg[c] += gi;
    sgd[c] = std::fma(gi, static_cast<double>(x[c]) - mean[c], sgd[c]);
  }
}

// `width` sums per channel over all rows: row_fn(row, acc) adds one row into acc[width *
// channels], blocks as Note [channels-last batch norm] says.
template <class RowFn>
std::vector<double> channel_sums(int64_t rows, int64_t channels, int64_t width, RowFn row_fn) {
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int64_t span = width * channels;
  std::vector<double> part(static_cast<size_t>(blocks * span), 0.0);
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double* acc = part.data() + b * span;
      for (int64_t r = b * kBlockRows; r < std::min(rows, (b + 1) * kBlockRows); ++r)
        row_fn(r, acc);
    }
  });
  std::vector<double> total(static_cast<size_t>(span), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < span; ++i) total[i] += part[b * span + i];
  return total;
}

// out[r, c] = fma(a[r, c] - m[c], s[c], t[c]), or with b: fma(b[r, c], u[c], fma(a[r, c] - m[c],
// s[c], t[c])), row by row across threads.
void channel_map(int64_t rows, int64_t channels, const float* a, const float* b, float* out,
                 const std::vector<float>& m, const std::vector<float>& s,
                 const std::vector<float>& t, const std::vector<float>& u) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(channels, 1));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* ar = a + r * channels;
      float* orow = out + r * channels;
      int64_t c = 0;
      for (; c + 8 <= channels; c += 8) {
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(ar + c), _mm256_loadu_ps(m.data() + c));
        __m256 v = _mm256_fmadd_ps(d, _mm256_loadu_ps(s.data() + c), _mm256_loadu_ps(t.data() + c));
        if (b != nullptr)
          v = _mm256_fmadd_ps(_mm256_loadu_ps(b + r * channels + c), _mm256_loadu_ps(u.data() + c),
                              v);
        _mm256_storeu_ps(orow + c, v);
      }
      for (; c < channels; ++c) {
        float v = std::fma(ar[c] - m[c], s[c], t[c]);
        if (b != nullptr) v = std::fma(b[r * channels + c], u[c], v);
        orow[c] = v;
      }
    }
  });
}

const float* f32(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(t.raw_data()) : nullptr;
}
float* f32_mut(const Tensor& t) {
  return t.defined() ? static_cast<float*>(t.raw_data()) : nullptr;
}

}  // namespace

void batch_norm_forward_last_kernel(int64_t rows, int64_t channels, double eps, const Tensor& x,
                                    const Tensor& weight, const Tensor& bias, const Tensor& y,
                                    const Tensor& mean, const Tensor& var) {
  const float* px = f32(x);
  const double count = static_cast<double>(rows);
  std::vector<double> m = channel_sums(rows, channels, 1, [&](int64_t r, double* acc) {
    add_row(px + r * channels, channels, acc);
  });
  for (double& v : m) v /= count;
  const std::vector<double> ss = channel_sums(rows, channels, 1, [&](int64_t r, double* acc) {
    add_sq_dev_row(px + r * channels, channels, m.data(), acc);
  });
  const float *pw = f32(weight), *pb = f32(bias);
  std::vector<float> mf(channels), scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double v = ss[c] / count;
    f32_mut(mean)[c] = static_cast<float>(m[c]);
    f32_mut(var)[c] = static_cast<float>(v);
    mf[c] = static_cast<float>(m[c]);
    scale[c] = static_cast<float>((pw ? pw[c] : 1.0) / std::sqrt(v + eps));
    shift[c] = pb ? pb[c] : 0.0f;
  }
  channel_map(rows, channels, px, nullptr, f32_mut(y), mf, scale, shift, {});
}

void batch_norm_backward_last_kernel(int64_t rows, int64_t channels, double eps,
                                     const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                     const Tensor& var, const Tensor& weight,
                                     const Tensor& grad_mean, const Tensor& grad_var,
                                     const Tensor& grad_input, const Tensor& grad_weight,
                                     const Tensor& grad_bias) {
  const float *pg = f32(grad_out), *px = f32(x), *pw = f32(weight);
  const float *pgm = f32(grad_mean), *pgv = f32(grad_var);
  std::vector<double> m(channels);
  for (int64_t c = 0; c < channels; ++c) m[c] = f32(mean)[c];
  const std::vector<double> sums = channel_sums(rows, channels, 2, [&](int64_t r, double* acc) {
    add_grad_row(pg + r * channels, px + r * channels, channels, m.data(), acc, acc + channels);
  });
  const double n = static_cast<double>(rows);
  std::vector<float> alpha(channels), mf(channels), beta(channels), c0(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double sg = sums[c], sgd = sums[channels + c];
    const double rstd = 1.0 / std::sqrt(static_cast<double>(f32(var)[c]) + eps);
    if (float* gw = f32_mut(grad_weight)) gw[c] = static_cast<float>(sgd * rstd);
    if (float* gb = f32_mut(grad_bias)) gb[c] = static_cast<float>(sg);
    const double w = pw ? pw[c] : 1.0;
    alpha[c] = static_cast<float>(rstd * w);
    mf[c] = static_cast<float>(m[c]);
    beta[c] = static_cast<float>(2.0 * (pgv ? pgv[c] : 0.0) / n - rstd * rstd * rstd * w * sgd / n);
    c0[c] = static_cast<float>((pgm ? pgm[c] : 0.0) / n - rstd * w * sg / n);
  }
  if (grad_input.defined())
    channel_map(rows, channels, px, pg, f32_mut(grad_input), mf, beta, c0, alpha);
}

}  // namespace detail
}  // namespace kiln
