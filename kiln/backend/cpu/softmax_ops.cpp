// CPU kernel of softmax and log_softmax (Note [kernel table]): one pass per row along the dim.
// The definitions (attributes, infer, vjp) and the reference decompositions are in
// kiln/ops/softmax.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/backend/cpu/vec_math.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax_ops.h"

namespace kiln {

namespace {

constexpr int64_t kBlock = 256;

// One row of `len` elements `stride` apart (kUnit: stride 1, so the loops vectorize). The row is
// max-subtracted before exp so that nothing overflows; a row holding NaN gives NaN. The sum of
// exponentials accumulates in double over 8 interleaved partial sums, element k into sum k % 8,
// added in a fixed order at the end: deterministic, and not bound by the latency of one chain of
// additions.
template <class T, bool kLog, bool kUnit>
void softmax_row(const T* p, T* q, int64_t len, int64_t stride) {
  using C = compute_t<T>;
  const int64_t st = kUnit ? 1 : stride;
  C m = -std::numeric_limits<C>::infinity();
  bool nan = false;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t k = 0; k < len; ++k) {
    const C v = static_cast<C>(p[k * st]);
    m = std::max(m, v);
    nan |= std::isnan(v);
  }
  if (nan) m = std::numeric_limits<C>::quiet_NaN();
  // exp(x - m) a block at a time with vmath (Note [vectorized math]); a float or double softmax
  // keeps the exponentials in the output and scales them after.
  constexpr bool kKeep = !kLog && std::is_same_v<T, C>;
  alignas(32) C t[kBlock];
  auto exp_block = [&](int64_t k0, int64_t b) {
#pragma omp simd
    for (int64_t j = 0; j < b; ++j) t[j] = static_cast<C>(p[(k0 + j) * st]) - m;
    vmath::exp(t, t, b);
  };
  double part[8] = {};
  for (int64_t k0 = 0; k0 < len; k0 += kBlock) {
    const int64_t b = std::min(kBlock, len - k0);
    exp_block(k0, b);
    int64_t j = 0;
    for (; j + 8 <= b; j += 8)
#pragma omp simd
      for (int l = 0; l < 8; ++l) part[l] += static_cast<double>(t[j + l]);
    for (int l = 0; j < b; ++j, ++l) part[l] += static_cast<double>(t[j]);
    if constexpr (kKeep)
#pragma omp simd
      for (int64_t i = 0; i < b; ++i) q[(k0 + i) * st] = t[i];
  }
  const double s =
      ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  if constexpr (kLog) {
    const C log_s = static_cast<C>(std::log(s));
#pragma omp simd
    for (int64_t k = 0; k < len; ++k)
      q[k * st] = static_cast<T>(static_cast<C>(p[k * st]) - m - log_s);
  } else if constexpr (kKeep) {
#pragma omp simd
    for (int64_t k = 0; k < len; ++k) q[k * st] = static_cast<T>(q[k * st] / s);
  } else {
    for (int64_t k0 = 0; k0 < len; k0 += kBlock) {
      const int64_t b = std::min(kBlock, len - k0);
      exp_block(k0, b);
      for (int64_t j = 0; j < b; ++j) q[(k0 + j) * st] = static_cast<T>(t[j] / s);
    }
  }
}

template <class T, bool kLog>
void softmax_rows(const Tensor& x, const Tensor& out, int64_t dim) {
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  int64_t outer = 1, inner = 1;
  const int64_t len = x.dim() == 0 ? 1 : x.shape()[dim];
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) outer *= x.shape()[d];
    if (d > dim) inner *= x.shape()[d];
  }
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(len, 1));
  parallel_for(0, outer * inner, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t start = (r / inner) * len * inner + r % inner;
      if (inner == 1)
        softmax_row<T, kLog, true>(px + start, po + start, len, 1);
      else
        softmax_row<T, kLog, false>(px + start, po + start, len, inner);
    }
  });
}

template <bool kLog>
void softmax_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  Tensor x = in[0];
  if (!x.is_contiguous()) {
    NoGradGuard no_grad;
    x = contiguous(x);
  }
  const int64_t dim = wrap_dim(detail::softmax_attrs(op).dim, x.dim(), op.name());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) softmax_rows<T, kLog>(x, out[0], dim);
  });
}

KILN_REGISTER_KERNEL("softmax", DeviceType::CPU, softmax_kernel<false>);
KILN_REGISTER_KERNEL("log_softmax", DeviceType::CPU, softmax_kernel<true>);

}  // namespace

}  // namespace kiln
