#include <gtest/gtest.h>

#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"

namespace kiln {
namespace {

TEST(ChannelAffine, HandComputed) {
  Tensor x = tensor<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 2, 2});
  Tensor y = channel_affine(x, tensor<float>({2, -1}), tensor<float>({0.5f, 10}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2.5f, 4.5f, 7, 6, 10.5f, 12.5f, 3, 2}));
}

TEST(ChannelAffine, IsBatchNormEvaluation) {
  manual_seed(4);
  Tensor x = randn({4, 5, 6, 7}), rm = randn({5}), rv = add(rand({5}), 0.5);
  Tensor w = randn({5}), b = randn({5});
  const std::vector<float> got = batch_norm(x, rm, rv, w, b, false).to_vector<float>();
  const std::vector<float> want = reference::batch_norm(x, rm, rv, w, b, false).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i])));
}

TEST(ChannelAffine, Errors) {
  try {
    channel_affine(ones({2, 3, 4}), ones({4}), ones({3}));
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part : {"[channel_affine]", "scale", "[4]", "test_channel_affine.cpp"})
      EXPECT_NE(what.find(part), std::string::npos) << what;
  }
  EXPECT_THROW(channel_affine(ones({3}), ones({3}), ones({3})), Error);
  EXPECT_THROW(channel_affine(ones({2, 3}), ones({3}), ones({3}, {DType::Float64})), Error);
}

}  // namespace
}  // namespace kiln
