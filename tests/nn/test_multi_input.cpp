// Modules with several inputs (Module::forward_many).
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

// Two towers joined by a sum, and the towers' outputs as extra results.
class TwoTower final : public nn::Module {
 public:
  TwoTower() : Module("TwoTower") {
    left = register_module("left", std::make_shared<nn::Linear>(3, 2));
    right = register_module("right", std::make_shared<nn::Linear>(5, 2));
  }
  std::vector<Tensor> forward_many(const std::vector<Tensor>& in) override {
    if (in.size() != 2)
      fail("TwoTower", Loc::current(), "expected 2 inputs, but got {}", in.size());
    Tensor a = (*left)(in[0]), b = (*right)(in[1]);
    return {add(a, b), a, b};
  }
  std::shared_ptr<nn::Linear> left, right;
};

TEST(MultiInput, AModuleTakesAndReturnsSeveralTensorsAndTrains) {
  TwoTower model;
  Tensor x = randn({4, 3}), y = randn({4, 5});
  std::vector<Tensor> out = model({x, y});
  ASSERT_EQ(out.size(), 3u);
  test::expect_allclose(out[0], add(out[1], out[2]), 1e-6);
  out[0].sum().backward();
  EXPECT_TRUE(model.left->weight.grad().defined());
  EXPECT_TRUE(model.right->weight.grad().defined());
}

TEST(MultiInput, ErrorsSayHowToCallTheModule) {
  nn::Linear linear(3, 2);
  const std::string e = test::error_of([&] { linear({randn({2, 3}), randn({2, 3})}); });
  test::expect_contains(e, {"[Linear] expected 1 input", "forward_many"});
  EXPECT_EQ(e.find("module.cpp"), std::string::npos) << "names kiln's own line: " << e;
  TwoTower model;
  test::expect_error(
      [&] {
        model(randn({2, 3}));
      },
      {"[TwoTower] forward(x) is not implemented", "model({x, y})"});
}

TEST(MultiInput, ASingleInputModuleRefusesSeveralInputs) {
  nn::Linear linear(3, 2);
  EXPECT_EQ(linear(std::vector<Tensor>{randn({2, 3})})[0].shape(), (Shape{2, 2}));
  test::expect_error(
      [&] {
        linear({randn({2, 3}), randn({2, 3})});
      },
      {"[Linear] expected 1 input", "got 2", "forward_many"});
}

}  // namespace
}  // namespace kiln
