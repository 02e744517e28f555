// Keras-style regularizers: values by hand, gradients through autograd, module-tree collection,
// and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/regularizer.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln::nn {
namespace {

using test::error_of;
using test::expect_contains;
using test::expect_values;

TEST(NnRegularizer, KerasDefinitions) {
  Tensor x = tensor({1.0, -2.0, 0.5, 0.0}, {DType::Float64});
  // sum |x| = 3.5, sum x^2 = 5.25.
  EXPECT_DOUBLE_EQ(l1(0.1)(x).item(), 0.35);
  EXPECT_DOUBLE_EQ(l2(0.1)(x).item(), 0.525);  // no 1/2 factor
  EXPECT_DOUBLE_EQ(l1_l2(0.1, 0.2)(x).item(), 0.35 + 1.05);
  EXPECT_DOUBLE_EQ(l1()(x).item(), 0.035);  // Keras' default factor 0.01
  EXPECT_DOUBLE_EQ(l2()(x).item(), 0.0525);
  EXPECT_DOUBLE_EQ(l1_l2()(x).item(), 0.035 + 0.0525);
  Tensor zero = l1_l2(0.0, 0.0)(x);
  EXPECT_EQ(zero.dim(), 0);
  EXPECT_EQ(zero.item(), 0.0);
  EXPECT_EQ(l2(0.5)(x).dim(), 0);
  EXPECT_EQ(l2(0.5)(x.to(DType::Float32)).dtype(), DType::Float32);

  EXPECT_EQ(l1(0.01).to_string(), "L1(l1=0.01)");
  EXPECT_EQ(l2(1e-4).to_string(), "L2(l2=0.0001)");
  EXPECT_EQ(l1_l2(0.01, 0.02).to_string(), "L1L2(l1=0.01, l2=0.02)");
  EXPECT_EQ(l1_l2(0.01, 0.02).l2(), 0.02);

  Regularizer custom("max_abs", [](const Tensor& t) { return max(abs(t)); });
  EXPECT_EQ(custom(x).item(), 2.0);
  EXPECT_EQ(custom.to_string(), "max_abs");
}

TEST(NnRegularizer, GradientIsTwoFTimesW) {
  Tensor w = tensor({0.3, -1.2, 2.0, -0.7}, {DType::Float64});
  w.set_requires_grad(true);
  const double f = 0.05;
  Tensor g = kiln::grad({l2(f)(w)}, {w})[0];
  expect_values(g, {2 * f * 0.3, 2 * f * -1.2, 2 * f * 2.0, 2 * f * -0.7});
  Tensor g1 = kiln::grad({l1(f)(w)}, {w})[0];
  expect_values(g1, {f, -f, f, -f});
  Tensor g12 = kiln::grad({l1_l2(f, 2 * f)(w)}, {w})[0];
  expect_values(g12, {f + 4 * f * 0.3, -f + 4 * f * -1.2, f + 4 * f * 2.0, -f + 4 * f * -0.7});
}

TEST(NnRegularizer, ModuleCollectsTheTreeAndIsDifferentiable) {
  auto fc1 = std::make_shared<Linear>(3, 4);
  auto fc2 = std::make_shared<Linear>(4, 2);
  Sequential net(fc1, std::make_shared<ReLU>(), fc2);
  EXPECT_FALSE(net.regularization_loss().defined());  // nothing attached: callers skip it

  fc1->add_regularizer("weight", l2(1e-2));
  net.add_regularizer("2.weight", l1(1e-3));  // a descendant's dotted name
  net.add_regularizer("2.bias", l1_l2(1e-3, 1e-2));

  Tensor w1 = fc1->weight.detach().to(DType::Float64), w2 = fc2->weight.detach().to(DType::Float64),
         b2 = fc2->bias.detach().to(DType::Float64);
  double want = 1e-2 * sum(mul(w1, w1)).item() + 1e-3 * sum(abs(w2)).item() +
                1e-3 * sum(abs(b2)).item() + 1e-2 * sum(mul(b2, b2)).item();
  Tensor loss = net.regularization_loss();
  ASSERT_TRUE(loss.defined());
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(loss.item(), want, 1e-6);
  // Sub-trees see only their own terms.
  EXPECT_NEAR(fc1->regularization_loss().item(), 1e-2 * sum(mul(w1, w1)).item(), 1e-6);

  loss.backward();
  std::vector<float> g = fc1->weight.grad().to_vector<float>(), w = fc1->weight.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], 2 * 1e-2 * w[i], 1e-7);
  EXPECT_FALSE(fc1->bias.grad().defined());  // not regularized

  // Terms follow the parameters' current values (and a second regularizer on one parameter adds).
  {
    NoGradGuard no_grad;
    fc1->weight.fill_(1.0);
  }
  fc1->add_regularizer("weight", l1(1.0));
  EXPECT_NEAR(fc1->regularization_loss().item(), 12 * 1e-2 + 12.0, 1e-5);

  // A shared submodule counts once.
  Sequential shared(fc1, fc1);
  EXPECT_NEAR(shared.regularization_loss().item(), 12 * 1e-2 + 12.0, 1e-5);
}

TEST(NnRegularizer, ConvolutionUsers) {
  Conv2d conv(2, 3, 3);
  conv.add_regularizer("weight", l2(1e-4));
  Tensor w = conv.weight.detach().to(DType::Float64);
  EXPECT_NEAR(conv.regularization_loss().item(), 1e-4 * sum(mul(w, w)).item(), 1e-9);
}

TEST(NnRegularizer, Errors) {
  Linear fc(2, 3);
  expect_contains(
      error_of([&] { fc.add_regularizer("kernel", l2(0.1)); }),
      {"[add_regularizer]", "Linear", "'kernel'", "weight, bias", "test_regularizer.cpp"});
  Sequential net(std::make_shared<Linear>(2, 2));
  expect_contains(error_of([&] { net.add_regularizer("1.weight", l2(0.1)); }),
                  {"[add_regularizer]", "Sequential", "'1.weight'", "0.weight, 0.bias"});
  expect_contains(error_of([&] { ReLU().add_regularizer("weight", l2()); }),
                  {"[add_regularizer]", "ReLU", "no parameters"});
  expect_contains(error_of([] { l2(-0.1); }),
                  {"[Regularizer]", "l2", ">= 0", "-0.1", "test_regularizer.cpp"});
  expect_contains(error_of([] { l1(std::nan("")); }), {"[Regularizer]", "l1", "nan"});
  expect_contains(error_of([] { l2(0.1)(ones({2}, {DType::Int64})); }),
                  {"[Regularizer]", "L2(l2=0.1)", "int64[2]"});
  Regularizer bad("vector_penalty", [](const Tensor& t) { return abs(t); });
  expect_contains(error_of([&] { bad(ones({3})); }),
                  {"[Regularizer]", "vector_penalty", "one value", "float32[3]"});
}

}  // namespace
}  // namespace kiln::nn
