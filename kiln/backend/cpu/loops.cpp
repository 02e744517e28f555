#include "kiln/backend/cpu/loops.h"

#include <immintrin.h>

namespace kiln {

namespace {

// Note [bfloat16 rounding loop]: float32 -> bfloat16 is every autocast cast of an activation
// (and of its gradient on the way back), and BFloat16::from_float's NaN branch keeps the generic
// loop scalar: 1.2 ms for 3.2M values, against 0.14 ms the other way. Sixteen at a time here, with
// the same rounding (to nearest even, by adding 0x7fff plus the kept half's lowest bit) and the
// same quieted NaN, so the results are bit for bit those of from_float.
void float_to_bfloat16(const float* src, uint16_t* dst, int64_t n) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  auto round8 = [&](const float* p) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(p));
    const __m256i upper = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(upper, one))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), inf);
    return _mm256_blendv_epi8(rounded, _mm256_or_si256(upper, quiet), nan);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // Each 32-bit lane holds a value below 2^16, so the unsigned saturating pack is exact; it
    // interleaves the 128-bit halves, which the permute puts back in order.
    const __m256i packed = _mm256_packus_epi32(round8(src + i), round8(src + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_permute4x64_epi64(packed, 0xD8));
  }
  for (; i < n; ++i) dst[i] = BFloat16::from_float(src[i]);
}

}  // namespace

void copy_into(const Tensor& dst, const Tensor& src) {
  if (src.dtype() == DType::Float32 && dst.dtype() == DType::BFloat16 &&
      same_dense_layout(src, dst)) {
    const auto* s = static_cast<const float*>(src.raw_data());
    auto* d = static_cast<uint16_t*>(dst.raw_data());
    parallel_for(0, dst.numel(), kGrain,
                 [&](int64_t b, int64_t e) { float_to_bfloat16(s + b, d + b, e - b); });
    return;
  }
  visit_dtype(dst.dtype(), [&](auto to) {
    using TO = typename decltype(to)::type;
    visit_dtype(src.dtype(), [&](auto from) {
      using TA = typename decltype(from)::type;
      map_unary<TA, TO>(src, dst, [](auto v) { return static_cast<compute_t<TO>>(v); });
    });
  });
}

}  // namespace kiln
