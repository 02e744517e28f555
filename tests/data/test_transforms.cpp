#include <gtest/gtest.h>

#include <vector>

#include "kiln/data/transforms.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/pad.h"

namespace kiln::data {
namespace {

TEST(DataTransforms, ToFloatScalesUint8) {
  Tensor x = tensor<uint8_t>({0, 51, 255}, Shape{1, 1, 3});
  Tensor y = ToFloat{}(x, {});
  EXPECT_EQ(y.dtype(), DType::Float32);
  auto v = y.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 0.0f);
  EXPECT_FLOAT_EQ(v[1], 0.2f);
  EXPECT_FLOAT_EQ(v[2], 1.0f);
}

TEST(DataTransforms, NormalizePerChannel) {
  // Two channels of 1x2: (x - mean[c]) / std[c].
  Tensor x = tensor<float>({1, 3, 10, 20}, Shape{2, 1, 2});
  Tensor y = Normalize({1.0, 10.0}, {2.0, 5.0})(x, {});
  EXPECT_EQ(y.shape(), (Shape{2, 1, 2}));
  auto v = y.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 0.0f);
  EXPECT_FLOAT_EQ(v[1], 1.0f);
  EXPECT_FLOAT_EQ(v[2], 0.0f);
  EXPECT_FLOAT_EQ(v[3], 2.0f);
}

TEST(DataTransforms, NormalizeRejectsWrongChannels) {
  Tensor x = zeros(Shape{3, 4, 4});
  try {
    Normalize({0.5, 0.5}, {0.1, 0.1})(x, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[Normalize]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 4, 4]"), std::string::npos) << msg;
  }
  EXPECT_THROW(Normalize({0.5}, {0.0}), Error);
}

TEST(DataTransforms, RandomCropShapeAndDeterminism) {
  Tensor x = arange(2 * 5 * 5, TensorOptions{DType::Float32}).reshape(Shape{2, 5, 5});
  RandomCrop crop(4, 2);
  SampleContext ctx{7, 3, 11, 0};
  Tensor a = crop(x, ctx);
  EXPECT_EQ(a.shape(), (Shape{2, 4, 4}));
  EXPECT_EQ(a.to_vector<float>(), crop(x, ctx).to_vector<float>());
  // Over many indices the crop position must vary (and padding zeros appear).
  bool differs = false;
  for (int64_t i = 0; i < 32 && !differs; ++i) {
    SampleContext other{7, 3, i, 0};
    differs = crop(x, other).to_vector<float>() != a.to_vector<float>();
  }
  EXPECT_TRUE(differs);
}

TEST(DataTransforms, RandomCropWithoutPaddingIsAWindow) {
  Tensor x = arange(16, TensorOptions{DType::Float32}).reshape(Shape{1, 4, 4});
  Tensor y = RandomCrop(4, 0)(x, {1, 0, 0, 0});
  EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
  EXPECT_THROW(RandomCrop(5, 0)(x, {}), Error);
}

TEST(DataTransforms, RandomHorizontalFlip) {
  Tensor x = tensor<float>({1, 2, 3, 4, 5, 6}, Shape{1, 2, 3});
  std::vector<float> flipped = {3, 2, 1, 6, 5, 4};
  EXPECT_EQ(RandomHorizontalFlip(1.0)(x, {}).to_vector<float>(), flipped);
  EXPECT_EQ(RandomHorizontalFlip(0.0)(x, {}).to_vector<float>(), x.to_vector<float>());
  int flips = 0;
  RandomHorizontalFlip flip(0.5);
  for (int64_t i = 0; i < 200; ++i) {
    SampleContext ctx{1, 2, i, 0};
    Tensor y = flip(x, ctx);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(y.to_vector<float>(), flip(x, ctx).to_vector<float>());
    flips += y.to_vector<float>() == flipped;
  }
  EXPECT_GT(flips, 60);
  EXPECT_LT(flips, 140);
}

TEST(DataTransforms, ComposeStagesDrawIndependentBits) {
  SampleContext ctx{5, 1, 9, 0};
  SampleContext s1 = ctx, s2 = ctx;
  s1.stream = 1;
  s2.stream = 2;
  EXPECT_NE(sample_bits(s1), sample_bits(s2));
  SampleContext e2 = ctx;
  e2.epoch = 2;
  EXPECT_NE(sample_bits(ctx), sample_bits(e2));

  Tensor x = ones(Shape{1, 3, 3}, TensorOptions{DType::UInt8});
  Compose pipeline(
      {ToFloat{}, RandomCrop(2, 1), RandomHorizontalFlip(0.5), Normalize({0.5}, {0.5})});
  Tensor y = pipeline(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(y.to_vector<float>(), pipeline(x, ctx).to_vector<float>());
}

}  // namespace
}  // namespace kiln::data

// The direct kernels (Note [transform kernels]) against the op chains they replace.
namespace kiln::data {
namespace {

SampleContext context(int64_t index) {
  return SampleContext{11, 2, index, 0};
}

TEST(DataTransforms, KernelsEqualTheirOpChains) {
  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  const Tensor all = tensor<uint8_t>(bytes, Shape{1, 16, 16});
  const Tensor f = ToFloat()(all, context(0));
  EXPECT_EQ(f.to_vector<float>(), div(all.to(DType::Float32), 255.0).to_vector<float>());

  const Tensor rgb =
      div(tensor<uint8_t>(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 243), Shape{3, 9, 9})
              .to(DType::Float32),
          7.0);
  const Tensor mean = tensor<float>({0.4914f, 0.4822f, 0.4465f}, Shape{3, 1, 1});
  const Tensor std = tensor<float>({0.2470f, 0.2435f, 0.2616f}, Shape{3, 1, 1});
  const Tensor normalized =
      Normalize({0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616})(rgb, context(0));
  EXPECT_EQ(normalized.to_vector<float>(), div(sub(rgb, mean), std).to_vector<float>());

  for (DType dt : {DType::UInt8, DType::Float32, DType::Float64, DType::Int64}) {
    const Tensor img = all.to(dt).reshape({2, 8, 16}).transpose(-1, -2);  // non-contiguous
    for (int64_t index = 0; index < 40; ++index) {
      const SampleContext ctx = context(index);
      const Tensor cropped = RandomCrop(10, 3)(img, ctx);
      const auto bits = sample_bits(ctx);
      const int64_t top = bounded_int(bits[0], 16 + 6 - 10 + 1);
      const int64_t left = bounded_int(bits[1], 8 + 6 - 10 + 1);
      const Tensor want =
          pad(img, {3, 3, 3, 3}).narrow(-2, top, 10).narrow(-1, left, 10).contiguous();
      ASSERT_EQ(cropped.shape(), want.shape());
      EXPECT_EQ(cropped.to(DType::Float64).to_vector<double>(),
                want.to(DType::Float64).to_vector<double>())
          << dtype_name(dt) << " sample " << index;

      const Tensor flipped = RandomHorizontalFlip(1.0)(img, ctx);
      const Tensor reversed = index_select(img, -1, tensor<int64_t>({7, 6, 5, 4, 3, 2, 1, 0}));
      EXPECT_EQ(flipped.to(DType::Float64).to_vector<double>(),
                reversed.to(DType::Float64).to_vector<double>());
    }
  }
}

}  // namespace
}  // namespace kiln::data
