#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kiln/nn/models.h"
#include "kiln/nn/summary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"

namespace kiln::nn {
namespace {

// Points every parameter and buffer at meta memory so a forward only infers shapes.
void to_meta(Module& m) {
  for (const Tensor& t : m.parameters())
    replace_tensor_data(t, empty(t.shape(), {t.dtype(), kMeta}));
  for (const Tensor& t : m.buffers()) replace_tensor_data(t, empty(t.shape(), {t.dtype(), kMeta}));
}

bool has_key(const StateDict& sd, const std::string& key) {
  return std::any_of(sd.begin(), sd.end(), [&](const auto& kv) { return kv.first == key; });
}

TEST(NnModels, MlpParameterCountAndShape) {
  auto net = mlp();
  EXPECT_EQ(net->num_parameters(), 784 * 256 + 256 + 256 * 10 + 10);
  StateDict sd = net->state_dict();
  ASSERT_EQ(sd.size(), 4u);
  EXPECT_EQ(sd[0].first, "1.weight");
  EXPECT_EQ(sd[3].first, "3.bias");
  Tensor y = (*net)(randn({2, 1, 28, 28}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));

  auto deep = mlp(12, {8, 6}, 3);
  EXPECT_EQ(deep->num_parameters(), 12 * 8 + 8 + 8 * 6 + 6 + 6 * 3 + 3);
  EXPECT_EQ((*deep)(randn({2, 3, 4})).shape(), (Shape{2, 3}));
}

TEST(NnModels, SmallCnnParametersNamesAndSummary) {
  auto net = small_cnn();
  EXPECT_EQ(net->num_parameters(), 421834);
  StateDict sd = net->state_dict();
  for (const char* key :
       {"conv1.weight", "conv1.bias", "bn1.weight", "bn1.running_mean", "bn1.num_batches_tracked",
        "conv2.weight", "bn2.running_var", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
    EXPECT_TRUE(has_key(sd, key)) << key;
  std::string s = summary(*net, {1, 28, 28});
  EXPECT_NE(s.find("Total params: 421,834\n"), std::string::npos) << s;
  EXPECT_EQ(small_cnn(3, 10, 32)->num_parameters(), 421834 + 2 * 32 * 9 + (4096 - 3136) * 128);
}

TEST(NnModels, SmallCnnForwardBackwardReachesEveryParameter) {
  auto net = small_cnn();
  Tensor y = (*net)(randn({2, 1, 28, 28}));
  ASSERT_EQ(y.shape(), (Shape{2, 10}));
  sum(y).backward();
  for (const auto& [name, p] : net->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
  }
}

// Building a ResNet-18 draws 11M initial weights, so each variant is built once (tests stay fast).
TEST(NnModels, ResNet18ParameterCountsNamesAndMetaForward) {
  auto gray = resnet18(1, 10);
  EXPECT_EQ(gray->num_parameters(), 11172810);
  StateDict sd = gray->state_dict();
  for (const char* key :
       {"conv1.weight", "bn1.running_mean", "layer1.0.conv1.weight", "layer1.1.bn2.bias",
        "layer2.0.shortcut.0.weight", "layer2.0.shortcut.1.running_var", "layer4.1.conv2.weight",
        "linear.weight", "linear.bias"})
    EXPECT_TRUE(has_key(sd, key)) << key;
  EXPECT_FALSE(has_key(sd, "layer1.0.shortcut.0.weight"));
  EXPECT_FALSE(has_key(sd, "conv1.bias"));
  to_meta(*gray);
  Tensor y = (*gray)(empty({2, 1, 28, 28}, {DType::Float32, kMeta}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  EXPECT_TRUE(y.is_meta());

  auto rgb = resnet18(3, 10);
  EXPECT_EQ(rgb->num_parameters(), 11173962);
  to_meta(*rgb);
  EXPECT_EQ((*rgb)(empty({2, 3, 32, 32}, {DType::Float32, kMeta})).shape(), (Shape{2, 10}));
  rgb->eval();
  EXPECT_EQ((*rgb)(empty({2, 3, 32, 32}, {DType::Float32, kMeta})).shape(), (Shape{2, 10}));
}

}  // namespace
}  // namespace kiln::nn
