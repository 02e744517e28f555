// Note [bfloat16 rounding loop]: the vectorized float32 -> bfloat16 conversion gives exactly what
// BFloat16::from_float gives, for every kind of value, in both dense layouts and at every tail
// length; other layouts take the generic loop, which must agree too.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

std::vector<float> special_values() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7f800001u),  // signalling NaN: quieted
                          std::bit_cast<float>(0xff800001u),
                          std::numeric_limits<float>::max(),  // rounds up to infinity
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          std::bit_cast<float>(0x3f808000u),   // a tie, kept half even: down
                          std::bit_cast<float>(0x3f818000u),   // a tie, kept half odd: up
                          std::bit_cast<float>(0x3f808001u),   // just above a tie: up
                          std::bit_cast<float>(0x3f807fffu),   // just below a tie: down
                          std::bit_cast<float>(0x7f7f8000u)};  // a tie at the top: infinity
  return v;
}

void expect_from_float(const Tensor& src32, const Tensor& got) {
  ASSERT_EQ(got.dtype(), DType::BFloat16);
  const Tensor plain_src = src32.contiguous(), plain_got = got.contiguous();
  const auto* s = static_cast<const float*>(plain_src.raw_data());
  const auto* g = static_cast<const uint16_t*>(plain_got.raw_data());
  for (int64_t i = 0; i < plain_src.numel(); ++i)
    ASSERT_EQ(g[i], BFloat16::from_float(s[i]))
        << "at " << i << ": 0x" << std::hex << std::bit_cast<uint32_t>(s[i]);
}

TEST(Bfloat16Rounding, EqualsFromFloatBitForBit) {
  manual_seed(5);
  const std::vector<float> special = special_values();
  // Lengths around the 16-wide loop and its tail, and one long enough to be split across threads.
  for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 100003}) {
    SCOPED_TRACE(n);
    Tensor x = mul(randn({n}), 1000.0);
    float* p = static_cast<float*>(x.raw_data());
    for (int64_t i = 0; i < n; ++i)
      if (i % 3 == 0) p[i] = special[static_cast<size_t>(i / 3) % special.size()];
    expect_from_float(x, to_dtype(x, DType::BFloat16));
  }
}

TEST(Bfloat16Rounding, ChannelsLastAndStridedInputs) {
  manual_seed(6);
  Tensor x = contiguous(randn({2, 5, 3, 4}), MemoryFormat::kChannelsLast);
  // copy_ into a channels-last bfloat16 tensor: both dense in the same layout.
  Tensor y = empty(x.shape(), {DType::BFloat16, kCPU, false, MemoryFormat::kChannelsLast});
  y.copy_(x);
  ASSERT_TRUE(y.is_channels_last());
  expect_from_float(x, y);
  Tensor strided = narrow(randn({6, 40}), 1, 3, 33);  // not dense: the generic loop
  expect_from_float(strided, to_dtype(strided, DType::BFloat16));
}

}  // namespace
}  // namespace kiln
