#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/nn/container.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::nn {
namespace {

struct Stats {
  double min, max, mean, std;
};

Stats stats_of(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s{*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), 0, 0};
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(ss / static_cast<double>(v.size()));
  return s;
}

// U(-b, b) has std b / sqrt(3); checks bounds, that the range is used, and the spread.
void expect_uniform(const Tensor& t, double bound) {
  Stats s = stats_of(t);
  EXPECT_GE(s.min, -bound);
  EXPECT_LT(s.max, bound);
  EXPECT_GT(s.max, 0.9 * bound);
  EXPECT_LT(s.min, -0.9 * bound);
  EXPECT_NEAR(s.mean, 0.0, 0.05 * bound);
  EXPECT_NEAR(s.std, bound / std::sqrt(3.0), 0.05 * bound);
}

TEST(NnInit, FanComputationMatchesPyTorch) {
  // torch.nn.init._calculate_fan_in_and_fan_out on the same shapes.
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(empty({10, 128})), std::make_pair(128L, 10L));
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(empty({32, 16, 3, 3})), std::make_pair(144L, 288L));
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(empty({4, 8, 5})), std::make_pair(40L, 20L));
  // ConvTranspose2d(4, 16, 3, groups=2) has weight [4, 8, 3, 3]: torch reads fan_in from dim 1.
  ConvTranspose2d ct(4, 16, 3, ConvTranspose2dOptions{.groups = 2});
  EXPECT_EQ(ct.weight.shape(), (Shape{4, 8, 3, 3}));
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(ct.weight), std::make_pair(72L, 36L));
  try {
    init::calculate_fan_in_and_fan_out(empty({5}));
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[calculate_fan_in_and_fan_out]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32[5]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_init.cpp"), std::string::npos) << msg;
  }
}

TEST(NnInit, Gains) {
  EXPECT_DOUBLE_EQ(init::calculate_gain("linear"), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("conv2d"), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1.0 + 1e-4)));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain("selu"), 0.75);
  EXPECT_THROW(init::calculate_gain("swish"), Error);
}

TEST(NnInit, LinearAndConvDefaultsAreTorchBounds) {
  manual_seed(0);
  Linear fc(128, 256);
  expect_uniform(fc.weight, 1.0 / std::sqrt(128.0));
  expect_uniform(fc.bias, 1.0 / std::sqrt(128.0));
  Conv2d conv(16, 64, 3);
  expect_uniform(conv.weight, 1.0 / std::sqrt(144.0));
  Stats b = stats_of(conv.bias);
  EXPECT_LT(b.max, 1.0 / 12.0);
  EXPECT_GE(b.min, -1.0 / 12.0);
}

TEST(NnInit, OtherLayerDefaults) {
  BatchNorm2d bn(3);
  EXPECT_EQ(bn.weight.to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(bn.bias.to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(bn.running_mean.to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(bn.running_var.to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::Int64);
  EXPECT_DOUBLE_EQ(bn.options.eps, 1e-5);
  EXPECT_DOUBLE_EQ(bn.options.momentum, 0.1);
  GroupNorm gn(2, 4);
  EXPECT_EQ(gn.weight.to_vector<float>(), std::vector<float>(4, 1.0f));
  LayerNorm ln({3, 2});
  EXPECT_EQ(ln.bias.shape(), (Shape{3, 2}));

  manual_seed(1);
  Embedding emb(300, 64, -1);
  EXPECT_EQ(*emb.padding_idx, 299);
  Stats s = stats_of(narrow(emb.weight, 0, 0, 299));
  EXPECT_NEAR(s.mean, 0.0, 0.02);
  EXPECT_NEAR(s.std, 1.0, 0.02);
  EXPECT_EQ(select(emb.weight, 0, 299).to_vector<float>(), std::vector<float>(64, 0.0f));
}

TEST(NnInit, KerasProfile) {
  manual_seed(2);
  Linear fc(100, 60, true, InitProfile::Keras);
  expect_uniform(fc.weight, std::sqrt(6.0 / 160.0));
  EXPECT_EQ(fc.bias.to_vector<float>(), std::vector<float>(60, 0.0f));
  Conv2d conv(8, 16, 3, {}, true, InitProfile::Keras);
  expect_uniform(conv.weight, std::sqrt(6.0 / (72.0 + 144.0)));
  BatchNorm2d bn(4, {}, InitProfile::Keras);
  EXPECT_DOUBLE_EQ(bn.options.eps, 1e-3);
  EXPECT_NEAR(bn.options.momentum, 0.01, 1e-15);
}

TEST(NnInit, KaimingXavierNormalStd) {
  manual_seed(4);
  Tensor w = empty({256, 512});
  init::kaiming_normal_(w, 0.0, init::FanMode::FanOut, "relu");
  EXPECT_NEAR(stats_of(w).std, std::sqrt(2.0 / 256.0), 0.002);
  init::xavier_normal_(w, 2.0);
  EXPECT_NEAR(stats_of(w).std, 2.0 * std::sqrt(2.0 / 768.0), 0.002);
  init::kaiming_uniform_(w, 0.0, init::FanMode::FanIn, "relu");
  expect_uniform(w, std::sqrt(6.0 / 512.0));
  init::xavier_uniform_(w);
  expect_uniform(w, std::sqrt(6.0 / 768.0));
  init::constant_(w, 0.5);
  EXPECT_EQ(stats_of(w).min, 0.5);
  EXPECT_THROW(init::uniform_(empty({2}, {DType::Int64})), Error);
}

TEST(NnInit, GeneratorMakesInitReproducible) {
  Linear a(7, 5), b(7, 5);
  Generator g1(42), g2(42);
  a.reset_parameters(&g1);
  b.reset_parameters(&g2);
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
  EXPECT_EQ(a.bias.to_vector<float>(), b.bias.to_vector<float>());
  EXPECT_TRUE(a.weight.requires_grad());
}

void expect_identity(const Tensor& m, double scale) {
  std::vector<double> v = m.to_vector<double>();
  int64_t n = m.size(0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      EXPECT_NEAR(v[i * n + j], i == j ? scale : 0.0, 1e-10) << i << "," << j;
}

TEST(NnInit, OrthogonalRowsOrColumnsAreOrthonormal) {
  manual_seed(5);
  Tensor wide = empty({3, 7}, {DType::Float64});
  init::orthogonal_(wide, 2.0);
  expect_identity(matmul(wide, transpose(wide, 0, 1)), 4.0);
  Tensor tall = empty({6, 2, 2}, {DType::Float64});  // viewed as [6, 4]
  init::orthogonal_(tall);
  Tensor flat = reshape(tall, {6, 4});
  expect_identity(matmul(transpose(flat, 0, 1), flat), 1.0);
  Tensor f32 = empty({4, 4});
  init::orthogonal_(f32);
  std::vector<float> v = matmul(f32, transpose(f32, 0, 1)).to_vector<float>();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(v[i * 5], 1.0f, 1e-5);
}

}  // namespace
}  // namespace kiln::nn
