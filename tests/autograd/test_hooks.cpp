// Tensor gradient hooks (Tensor::register_hook) and retain_grad.
#include <gtest/gtest.h>

#include "tests/support/test_util.h"

#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/function.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;
using test::expect_values;
using test::leaf;

TEST(Hooks, LeafHookReplacesTheGradient) {
  Tensor x = leaf({1.0, 2.0});
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return mul(g, 2.0);
  });
  sum(mul(x, x)).backward();
  EXPECT_EQ(seen, (std::vector<double>{2.0, 4.0}));
  expect_values(x.grad(), {4.0, 8.0});
}

TEST(Hooks, LeafHookSeesTheSummedGradientOnce) {
  // x is used twice: the hook runs once, on the total.
  Tensor x = leaf({1.0});
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    EXPECT_DOUBLE_EQ(g.item(), 5.0);
    return Tensor();
  });
  sum(add(mul(x, 2.0), mul(x, 3.0))).backward();
  EXPECT_EQ(calls, 1);
  expect_values(x.grad(), {5.0});
}

TEST(Hooks, NonLeafHookSeesAndCanChangeTheGradient) {
  Tensor x = leaf({1.0, -1.0});
  Tensor y = mul(x, 3.0);
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return Tensor();
  });
  sum(mul(y, y)).backward({}, true);
  EXPECT_EQ(seen, (std::vector<double>{6.0, -6.0}));  // 2y
  expect_values(x.grad(), {18.0, -18.0});
  EXPECT_FALSE(y.grad().defined());  // a hook does not retain the gradient

  Tensor x2 = leaf({1.0, -1.0});
  Tensor y2 = mul(x2, 3.0);
  y2.register_hook([](const Tensor& g) { return mul(g, 0.5); });
  sum(mul(y2, y2)).backward();
  expect_values(x2.grad(), {9.0, -9.0});
}

TEST(Hooks, UndefinedResultKeepsTheGradient) {
  Tensor x = leaf({2.0});
  bool called = false;
  x.register_hook([&](const Tensor&) {
    called = true;
    return Tensor();
  });
  sum(mul(x, 7.0)).backward();
  EXPECT_TRUE(called);
  expect_values(x.grad(), {7.0});
}

TEST(Hooks, MultipleHooksRunInRegistrationOrder) {
  for (bool on_leaf : {true, false}) {
    SCOPED_TRACE(on_leaf ? "leaf" : "non-leaf");
    Tensor x = leaf({1.0});
    Tensor t = on_leaf ? x : mul(x, 1.0);
    std::vector<std::string> order;
    t.register_hook([&](const Tensor& g) {
      order.push_back("double");
      return mul(g, 2.0);
    });
    t.register_hook([&](const Tensor& g) {
      order.push_back("observe");
      EXPECT_DOUBLE_EQ(g.item(), 2.0);  // sees the first hook's result
      return Tensor();
    });
    t.register_hook([&](const Tensor& g) {
      order.push_back("add one");
      return add(g, 1.0);
    });
    sum(t).backward();
    EXPECT_EQ(order, (std::vector<std::string>{"double", "observe", "add one"}));
    expect_values(x.grad(), {3.0});  // (1 * 2) + 1, not (1 + 1) * 2
  }
}

TEST(Hooks, RetainGradSeesTheGradientAtItsPlaceInTheHookOrder) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 2.0);
  y.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  y.retain_grad();
  sum(y).backward();
  expect_values(y.grad(), {10.0, 10.0});
  expect_values(x.grad(), {20.0, 20.0});
  EXPECT_FALSE(y.grad().requires_grad());
}

TEST(Hooks, HookOnATensorWithoutGradIsAnError) {
  Tensor c = tensor({1.0});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { c.register_hook([](const Tensor& g) { return g; }); });
  expect_contains(what, {"[register_hook]", "requires grad", "float32[1] on cpu",
                         "test_hooks.cpp:" + std::to_string(line)});
  line = __LINE__ + 1;
  what = error_of([&] { c.retain_grad(); });
  expect_contains(what, {"[retain_grad]", "test_hooks.cpp:" + std::to_string(line)});
}

TEST(Hooks, HookMustKeepTheGradientsShape) {
  Tensor x = leaf({1.0, 2.0});
  x.register_hook([](const Tensor& g) { return sum(g); });
  int line = __LINE__ + 1;
  std::string what = error_of([&] { sum(mul(x, 2.0)).backward(); });
  expect_contains(what, {"[backward]", "hook", "leaf float64[2] on cpu",
                         "returned float64[] on cpu", "test_hooks.cpp:" + std::to_string(line)});
  EXPECT_FALSE(x.grad().defined());
  Tensor y = mul(x, 3.0);
  int mul_line = __LINE__ - 1;
  y.register_hook([](const Tensor& g) { return to_dtype(g, DType::Float32); });
  what = error_of([&] { sum(y).backward(); });
  expect_contains(what, {"output 0 of 'mul'", "test_hooks.cpp:" + std::to_string(mul_line),
                         "returned float32[2] on cpu"});
}

// Passes no gradient to its input.
struct Blocker : autograd::Function<Blocker> {
  static constexpr const char* kName = "blocker";
  static std::vector<Tensor> forward(autograd::FunctionCtx&, const std::vector<Tensor>& in) {
    return {mul(in[0], 2.0)};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, const std::vector<Tensor>&) {
    return {Tensor()};
  }
};

TEST(Hooks, NotCalledWhenNoGradientFlows) {
  Tensor x = leaf({1.0});
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    EXPECT_TRUE(g.defined());
    return Tensor();
  });
  sum(Blocker::apply({x})[0]).backward();
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(x.grad().defined());
}

TEST(Hooks, HooksRunForGrad) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 3.0);
  int calls = 0;
  y.register_hook([&](const Tensor& g) {
    ++calls;
    return mul(g, -1.0);
  });
  Tensor g = grad({sum(y)}, {x})[0];
  EXPECT_EQ(calls, 1);
  expect_values(g, {-3.0, -3.0});
  EXPECT_FALSE(x.grad().defined());
}

}  // namespace
}  // namespace kiln
