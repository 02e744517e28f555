// CPU kernel of quantize_per_tensor (Note [int8 quantization] in kiln/ops/quantize.h): one pass,
// float32 arithmetic, round half to even (the default rounding mode, what oneDNN's reorders and
// `vcvtps2dq` do), saturation. The definition is in kiln/ops/quantize.cpp.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

template <class Q>
struct QuantizeTo {
  float inv_scale, lo, hi;
  Q operator()(float x) const {
    float r = std::nearbyint(x * inv_scale);
    r = r == r ? r : 0.0f;  // NaN
    r = r < lo ? lo : r;
    r = r > hi ? hi : r;
    return static_cast<Q>(r);
  }
};

// The common case, dense float32 in and out, eight at a time: the same operations in the same
// order as QuantizeTo (rounding by the current mode, round half to even by default, as
// std::nearbyint; clamping to integer bounds before or after rounding gives the same result).
template <class Q>
void quantize_dense_f32(const float* x, Q* y, int64_t n, const QuantizeTo<Q>& f) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    const __m256 inv = _mm256_set1_ps(f.inv_scale), lo = _mm256_set1_ps(f.lo),
                 hi = _mm256_set1_ps(f.hi);
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
      v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
      v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
      const __m256i q = _mm256_cvtps_epi32(v);
      // Narrow 8 int32 (already in range) to 8 bytes; the packs keep the order within a lane.
      const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const __m128i b = std::is_same_v<Q, uint8_t> ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), b);
    }
    for (; i < e; ++i) y[i] = f(x[i]);
  });
}

void quantize_per_tensor_kernel(const Op& op, const std::vector<Tensor>& in,
                                const std::vector<Tensor>& out) {
  const nlohmann::json attrs = op.attrs();
  const Attrs a(op.name(), attrs);
  const float inv_scale = static_cast<float>(1.0 / a.f("scale"));
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  auto run = [&](auto q_tag, float lo, float hi) {
    using Q = decltype(q_tag);
    const QuantizeTo<Q> f{inv_scale, lo, hi};
    if (x.dtype() == DType::Float32 && same_dense_layout(x, y)) {
      quantize_dense_f32(static_cast<const float*>(x.raw_data()), static_cast<Q*>(y.raw_data()),
                         y.numel(), f);
      return;
    }
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<compute_t<T>>)
        map_unary<T, Q>(x, y, [f](compute_t<T> v) { return f(static_cast<float>(v)); });
    });
  };
  if (y.dtype() == DType::UInt8)
    run(uint8_t{}, 0.0f, 255.0f);
  else
    run(int8_t{}, -127.0f, 127.0f);
}

KILN_REGISTER_KERNEL("quantize_per_tensor", DeviceType::CPU, quantize_per_tensor_kernel);

}  // namespace

}  // namespace kiln
