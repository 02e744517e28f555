#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/core/dtype.h"

namespace kiln {
namespace {

// torch.promote_types for every pair, read from PyTorch 1.13. kiln has no int16, so the two
// uint8/int8 entries (int16 in PyTorch) are int32.
TEST(DType, PromotionTableMatchesPyTorch) {
  using D = DType;
  const DType expected[9][9] = {
      {D::Bool, D::UInt8, D::Int8, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32,
       D::Float64},
      {D::UInt8, D::UInt8, D::Int32, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32,
       D::Float64},
      {D::Int8, D::Int32, D::Int8, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32,
       D::Float64},
      {D::Int32, D::Int32, D::Int32, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32,
       D::Float64},
      {D::Int64, D::Int64, D::Int64, D::Int64, D::Int64, D::Float16, D::BFloat16, D::Float32,
       D::Float64},
      {D::Float16, D::Float16, D::Float16, D::Float16, D::Float16, D::Float16, D::Float32,
       D::Float32, D::Float64},
      {D::BFloat16, D::BFloat16, D::BFloat16, D::BFloat16, D::BFloat16, D::Float32, D::BFloat16,
       D::Float32, D::Float64},
      {D::Float32, D::Float32, D::Float32, D::Float32, D::Float32, D::Float32, D::Float32,
       D::Float32, D::Float64},
      {D::Float64, D::Float64, D::Float64, D::Float64, D::Float64, D::Float64, D::Float64,
       D::Float64, D::Float64},
  };
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 9; ++j)
      EXPECT_EQ(promote_types(kAllDTypes[i], kAllDTypes[j]), expected[i][j])
          << dtype_name(kAllDTypes[i]) << " + " << dtype_name(kAllDTypes[j]);
}

TEST(DType, SizesNamesAndKinds) {
  EXPECT_EQ(itemsize(DType::BFloat16), 2u);
  EXPECT_EQ(itemsize(DType::Int64), 8u);
  EXPECT_STREQ(dtype_name(DType::Float16), "float16");
  EXPECT_TRUE(is_floating(DType::BFloat16));
  EXPECT_FALSE(is_floating(DType::Int64));
  EXPECT_TRUE(is_integral(DType::UInt8));
  EXPECT_FALSE(is_integral(DType::Bool));
  EXPECT_TRUE(is_integral(DType::Bool, true));
}

TEST(Half, RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(static_cast<float>(Half(1.0f)), 1.0f);
  EXPECT_EQ(Half(1.0f).bits, 0x3C00);
  EXPECT_EQ(static_cast<float>(Half(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(70000.0f))));
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties go to even (1).
  EXPECT_EQ(static_cast<float>(Half(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(static_cast<float>(Half(0x1p-24f)), 0x1p-24f);  // smallest subnormal
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(BFloat16, RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3F80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 0x1.8p-8f)), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(static_cast<float>(BFloat16(3.0e38f)), 3.00405527047391e+38f);  // from PyTorch
}

}  // namespace
}  // namespace kiln
