#include <gtest/gtest.h>

#include <string>

#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/summary.h"
#include "kiln/ops/factories.h"

namespace kiln::nn {
namespace {

std::shared_ptr<Sequential> small_cnn() {
  Conv2dOptions same{.padding = 1};
  return std::make_shared<Sequential>(
      std::make_shared<Conv2d>(1, 32, 3, same), std::make_shared<BatchNorm2d>(32),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(32, 64, 3, same), std::make_shared<BatchNorm2d>(64),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
      std::make_shared<Linear>(64 * 7 * 7, 128), std::make_shared<Linear>(128, 10));
}

TEST(NnSummary, SmallCnnMatchesPyTorchParameterCount) {
  auto net = small_cnn();
  // PyTorch: 320 + 64 + 18496 + 128 + 401536 + 1290.
  EXPECT_EQ(net->num_parameters(), 421834);
  std::string s = summary(*net, {1, 28, 28});
  EXPECT_NE(s.find("Total params: 421,834\n"), std::string::npos) << s;
  EXPECT_NE(s.find("Trainable params: 421,834\n"), std::string::npos) << s;
  EXPECT_NE(s.find("Non-trainable params: 0\n"), std::string::npos) << s;
  auto row = [&](const std::string& layer, const std::string& shape, const std::string& params) {
    size_t at = s.find(layer);
    ASSERT_NE(at, std::string::npos) << layer << "\n" << s;
    std::string line = s.substr(at, s.find('\n', at) - at);
    EXPECT_NE(line.find(shape), std::string::npos) << line;
    EXPECT_EQ(line.substr(line.find_last_not_of(' ', line.size()) - params.size() + 1), params)
        << line;
  };
  row("0 (Conv2d)", "[None, 32, 28, 28]", "320");
  row("1 (BatchNorm2d)", "[None, 32, 28, 28]", "64");
  row("3 (MaxPool2d)", "[None, 32, 14, 14]", "0");
  row("4 (Conv2d)", "[None, 64, 14, 14]", "18,496");
  row("7 (MaxPool2d)", "[None, 64, 7, 7]", "0");
  row("8 (Flatten)", "[None, 3136]", "0");
  row("9 (Linear)", "[None, 128]", "401,536");
  row("10 (Linear)", "[None, 10]", "1,290");
}

TEST(NnSummary, LeavesModuleUnchanged) {
  auto net = small_cnn();
  auto bn = std::dynamic_pointer_cast<BatchNorm2d>((*net)[1]);
  (*net)[9]->eval();  // a mixed mode must come back as it was
  std::vector<float> before = bn->running_var.to_vector<float>();
  summary(*net, {1, 28, 28});
  EXPECT_TRUE(net->is_training());
  EXPECT_TRUE(bn->is_training());
  EXPECT_FALSE((*net)[9]->is_training());
  EXPECT_FALSE(bn->weight.is_meta());
  EXPECT_EQ(bn->running_var.to_vector<float>(), before);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  // Still runs for real afterwards.
  Tensor y = (*net)(ones({2, 1, 28, 28}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
}

TEST(NnSummary, FrozenParametersCountAsNonTrainable) {
  auto net = small_cnn();
  for (const Tensor& p : (*net)[0]->parameters()) Tensor(p).set_requires_grad(false);
  std::string s = summary(*net, {1, 28, 28});
  EXPECT_NE(s.find("Trainable params: 421,514\n"), std::string::npos) << s;
  EXPECT_NE(s.find("Non-trainable params: 320\n"), std::string::npos) << s;
}

TEST(NnSummary, BadInputShapeNamesTheLayer) {
  auto net = small_cnn();
  try {
    summary(*net, {3, 28, 28});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[conv2d]"), std::string::npos) << e.what();
  }
  EXPECT_FALSE((*net)[0]->parameters()[0].is_meta());
}

}  // namespace
}  // namespace kiln::nn
