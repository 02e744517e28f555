#include <gtest/gtest.h>

#include <string>

#include "kiln/core/grad_mode.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::nn {
namespace {

TEST(NnLayers, LinearComputesXWtPlusB) {
  Linear fc(2, 3);
  {
    NoGradGuard no_grad;
    fc.weight.copy_(tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}).reshape({3, 2}));
    fc.bias.copy_(tensor({0.5, -0.5, 1.0}));
  }
  Tensor y = fc(tensor({1.0, -1.0, 2.0, 0.0}).reshape({2, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{-0.5f, -1.5f, 0.0f, 2.5f, 5.5f, 11.0f}));
  Linear nb(2, 1, /*bias=*/false);
  EXPECT_EQ(nb.named_parameters().size(), 1u);
  try {
    fc(ones({4, 5}));
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[Linear] expected input [..., 2], but got float32[4, 5]"),
              std::string::npos)
        << msg;
  }
}

TEST(NnLayers, ActivationsAndShapes) {
  Tensor x = tensor({-2.0, -0.5, 0.5, 3.0});
  EXPECT_EQ(LeakyReLU(0.1)(x).to_vector<float>(), (std::vector<float>{-0.2f, -0.05f, 0.5f, 3.0f}));
  EXPECT_EQ(ReLU()(x).to_vector<float>(), (std::vector<float>{0.0f, 0.0f, 0.5f, 3.0f}));
  std::vector<float> sm = Softmax(0)(x).to_vector<float>();
  float total = 0;
  for (float v : sm) total += v;
  EXPECT_NEAR(total, 1.0f, 1e-6);
  EXPECT_EQ(Sigmoid()(x).shape(), x.shape());
  EXPECT_EQ(Tanh()(x).shape(), x.shape());
  EXPECT_EQ(SiLU()(x).shape(), x.shape());
  EXPECT_EQ(GELU("tanh")(x).shape(), x.shape());

  Tensor img = ones({2, 4, 8, 8});
  EXPECT_EQ(Flatten()(img).shape(), (Shape{2, 256}));
  EXPECT_EQ(Flatten(0, 1)(img).shape(), (Shape{8, 8, 8}));
  EXPECT_EQ(MaxPool2d(2)(img).shape(), (Shape{2, 4, 4, 4}));
  EXPECT_EQ(AvgPool2d(2, AvgPool2dOptions{.stride = Size2(1)})(img).shape(), (Shape{2, 4, 7, 7}));
  EXPECT_EQ(AdaptiveAvgPool2d(1)(img).shape(), (Shape{2, 4, 1, 1}));
  EXPECT_EQ(Conv2d(4, 6, 3, {.stride = 2, .padding = 1})(img).shape(), (Shape{2, 6, 4, 4}));
  EXPECT_EQ(ConvTranspose2d(4, 2, 2, {.stride = 2})(img).shape(), (Shape{2, 2, 16, 16}));
  EXPECT_EQ(GroupNorm(2, 4)(img).shape(), img.shape());
  EXPECT_EQ(LayerNorm({8, 8})(img).shape(), img.shape());
  EXPECT_THROW(GroupNorm(3, 4), Error);
  EXPECT_THROW(Dropout(1.5), Error);
}

TEST(NnLayers, EmbeddingLooksUpRows) {
  Embedding emb(5, 3, 0);
  Tensor idx = tensor<int64_t>({0, 4, 4}, Shape{3});
  Tensor y = emb(idx);
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  std::vector<float> rows = y.to_vector<float>();
  std::vector<float> w = emb.weight.to_vector<float>();
  EXPECT_EQ(rows[0], 0.0f);
  EXPECT_EQ(rows[3], w[12]);
  EXPECT_THROW(Embedding(5, 3, 5), Error);
}

TEST(NnLayers, BatchNormChecksInputRank) {
  BatchNorm2d bn(3);
  try {
    bn(ones({2, 3}));
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[BatchNorm2d] expected input of rank 4 with 3 channels"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("float32[2, 3]"), std::string::npos) << msg;
  }
  BatchNorm1d no_stats(3, BatchNormOptions{.track_running_stats = false});
  no_stats.eval();
  EXPECT_EQ(no_stats.named_buffers().size(), 0u);
  EXPECT_EQ(no_stats(ones({4, 3})).shape(), (Shape{4, 3}));
}

}  // namespace
}  // namespace kiln::nn
