// kiln::grad: returned (not accumulated) gradients, create_graph and higher-order derivatives.
#include <gtest/gtest.h>

#include "tests/support/test_util.h"

#include <cmath>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;
using test::expect_values;
using test::leaf;

TEST(Grad, HigherDerivativesOfCube) {
  for (bool use_pow : {false, true}) {
    SCOPED_TRACE(use_pow ? "pow(x, 3)" : "x * x * x");
    Tensor x = leaf({0.5, -1.0, 2.0});
    Tensor y = use_pow ? pow(x, 3.0) : mul(mul(x, x), x);
    Tensor d1 = grad({sum(y)}, {x}, {}, false, /*create_graph=*/true)[0];
    ASSERT_TRUE(d1.requires_grad());
    expect_values(d1, {0.75, 3.0, 12.0});  // 3x^2
    Tensor d2 = grad({sum(d1)}, {x}, {}, false, true)[0];
    ASSERT_TRUE(d2.requires_grad());
    expect_values(d2, {3.0, -6.0, 12.0});  // 6x
    Tensor d3 = grad({sum(d2)}, {x}, {}, false, true)[0];
    expect_values(d3, {6.0, 6.0, 6.0});
    EXPECT_FALSE(x.grad().defined());
  }
}

TEST(Grad, WithoutCreateGraphTheGradientHasNoHistory) {
  Tensor x = leaf({2.0});
  Tensor g = grad({sum(mul(x, x))}, {x})[0];
  expect_values(g, {4.0});
  EXPECT_FALSE(g.requires_grad());
}

TEST(Grad, MixedSecondDerivative) {
  // f = x^2 y: df/dx = 2xy, d/dy (df/dx) = 2x.
  Tensor x = leaf({3.0});
  Tensor y = leaf({-2.0});
  Tensor f = mul(mul(x, x), y);
  Tensor dfdx = grad({sum(f)}, {x}, {}, false, true)[0];
  expect_values(dfdx, {-12.0});
  std::vector<Tensor> g2 = grad({sum(dfdx)}, {x, y});
  expect_values(g2[0], {-4.0});  // 2y
  expect_values(g2[1], {6.0});   // 2x
}

TEST(Grad, BackwardWithCreateGraphMakesDifferentiableGrad) {
  Tensor x = leaf({1.5, -0.5});
  sum(mul(mul(x, x), x)).backward({}, false, /*create_graph=*/true);
  Tensor g = x.grad();  // 3x^2 with history
  ASSERT_TRUE(g.requires_grad());
  expect_values(g, {6.75, 0.75});
  Tensor gg = grad({sum(g)}, {x})[0];
  expect_values(gg, {9.0, -3.0});
}

TEST(Grad, GradOfGradThroughCommonOps) {
  GradcheckOptions opts;
  opts.atol = 1e-6;
  auto one = [](auto f) {
    return TensorFn([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
  };
  Tensor a = sample_tensor({2, 3}, 11, -1.0, 1.0);
  Tensor b = sample_tensor({2, 3}, 12, -1.0, 1.0);
  Tensor m = sample_tensor({3, 4}, 13, -1.0, 1.0);
  Tensor pos = sample_tensor({2, 3}, 14, 0.5, 2.0);
  struct Case {
    const char* label;
    TensorFn fn;
    std::vector<Tensor> inputs;
  };
  std::vector<Case> cases = {
      {"mul", one([](const auto& in) { return mul(in[0], in[1]); }), {a, b}},
      {"mul(x, x)", one([](const auto& in) { return mul(in[0], in[0]); }), {a}},
      {"div", one([](const auto& in) { return div(in[0], in[1]); }), {a, pos}},
      {"exp", one([](const auto& in) { return exp(in[0]); }), {a}},
      {"log", one([](const auto& in) { return log(in[0]); }), {pos}},
      {"tanh", one([](const auto& in) { return tanh(in[0]); }), {a}},
      {"sigmoid", one([](const auto& in) { return sigmoid(in[0]); }), {a}},
      {"softmax", one([](const auto& in) { return softmax(in[0], -1); }), {a}},
      {"softmax dim 0", one([](const auto& in) { return softmax(in[0], 0); }), {a}},
      {"log_softmax", one([](const auto& in) { return log_softmax(in[0], 1); }), {a}},
      {"matmul", one([](const auto& in) { return matmul(in[0], in[1]); }), {a, m}},
      {"matmul(tanh)", one([](const auto& in) { return matmul(tanh(in[0]), in[1]); }), {a, m}},
      {"sum of squares", one([](const auto& in) { return sum(mul(in[0], in[0]), {1}); }), {a}},
      {"mean exp", one([](const auto& in) { return mean(exp(in[0])); }), {a}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    try {
      EXPECT_TRUE(gradcheck(c.fn, c.inputs, opts));
      EXPECT_TRUE(gradgradcheck(c.fn, c.inputs, opts));
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(Grad, GradgradcheckOfLinearFunctions) {
  // Their gradient is a constant without history: second derivatives are zero, and pass.
  Tensor a = sample_tensor({2, 3}, 21), b = sample_tensor({3}, 22);
  TensorFn add_fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{add(in[0], in[1])};
  };
  TensorFn mean_fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mean(in[0], {0}), sum(in[0])};
  };
  EXPECT_TRUE(gradgradcheck(add_fn, {a, b}));
  EXPECT_TRUE(gradgradcheck(mean_fn, {a}));
}

TEST(Grad, GradcheckCatchesAnOutputWithoutHistory) {
  // An op that forgot to record claims a zero derivative; finite differences disagree.
  TensorFn broken = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{exp(in[0]), kiln::detach(exp(in[0]))};
  };
  int line = __LINE__ + 1;
  std::string what = error_of([&] { gradcheck(broken, {sample_tensor({2}, 3)}); });
  expect_contains(what,
                  {"[gradcheck]", "mismatch", "input 0", "test_grad.cpp:" + std::to_string(line)});
  TensorFn integer = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{argmax(in[0])};
  };
  what = error_of([&] { gradcheck(integer, {sample_tensor({2}, 3)}); });
  expect_contains(what, {"[gradcheck]", "floating-point output"});
}

TEST(Grad, HessianVectorProductOfSoftmaxCrossEntropyLike) {
  // L = -sum(log_softmax(x)[target]); its Hessian is diag(p) - p p^T, so H v = p*v - p (p.v).
  Tensor x = leaf({0.1, -0.3, 0.7});
  Tensor v = tensor({1.0, 2.0, -1.0}, {DType::Float64});
  Tensor onehot = tensor({0.0, 1.0, 0.0}, {DType::Float64});
  Tensor loss = neg(sum(mul(log_softmax(x, 0), onehot)));
  Tensor g = grad({loss}, {x}, {}, false, true)[0];
  Tensor hv = grad({sum(mul(g, v))}, {x})[0];
  std::vector<double> xs = {0.1, -0.3, 0.7}, p(3);
  double z = 0;
  for (double e : xs) z += std::exp(e);
  for (size_t i = 0; i < 3; ++i) p[i] = std::exp(xs[i]) / z;
  double pv = p[0] * 1.0 + p[1] * 2.0 + p[2] * -1.0;
  expect_values(hv, {p[0] * (1.0 - pv), p[1] * (2.0 - pv), p[2] * (-1.0 - pv)}, 1e-12);
}

TEST(Grad, DoesNotTouchDotGrad) {
  Tensor x = leaf({1.0, 2.0});
  Tensor w = leaf({3.0, 4.0});
  Tensor loss = sum(mul(x, w));
  std::vector<Tensor> g = grad({loss}, {x}, {}, /*retain_graph=*/true);
  expect_values(g[0], {3.0, 4.0});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  // An existing .grad is left as it is.
  loss.backward({}, true);
  expect_values(x.grad(), {3.0, 4.0});
  grad({loss}, {x, w});
  expect_values(x.grad(), {3.0, 4.0});
  expect_values(w.grad(), {1.0, 2.0});
}

TEST(Grad, NonLeafInputsAndGradOutputs) {
  Tensor x = leaf({1.0, -2.0});
  Tensor y = mul(x, 3.0);
  Tensor z = mul(y, y);
  std::vector<Tensor> g = grad({z}, {y, x}, {tensor({1.0, 10.0}, {DType::Float64})});
  expect_values(g[0], {6.0, -120.0});   // 2y * seed
  expect_values(g[1], {18.0, -360.0});  // 18x * seed
  EXPECT_FALSE(x.grad().defined());
}

TEST(Grad, AllowUnused) {
  Tensor x = leaf({1.0});
  Tensor unused = leaf({5.0, 6.0});
  Tensor loss = sum(mul(x, 2.0));
  int line = __LINE__ + 1;
  std::string what = error_of([&] { grad({loss}, {x, unused}, {}, true); });
  expect_contains(what, {"[grad]", "input 1", "float64[2] on cpu", "not used", "allow_unused",
                         "test_grad.cpp:" + std::to_string(line)});
  std::vector<Tensor> g = grad({loss}, {x, unused}, {}, false, false, /*allow_unused=*/true);
  ASSERT_EQ(g.size(), 2u);
  expect_values(g[0], {2.0});
  EXPECT_FALSE(g[1].defined());
}

TEST(Grad, InputsMustRequireGrad) {
  Tensor x = leaf({1.0});
  Tensor c = tensor({1.0}, {DType::Float64});
  Tensor loss = sum(mul(x, c));
  int line = __LINE__ + 1;
  std::string what = error_of([&] { grad({loss}, {c}); });
  expect_contains(what, {"[grad]", "input 0", "does not", "test_grad.cpp:" + std::to_string(line)});
  line = __LINE__ + 1;
  what = error_of([&] { grad({loss}, {}); });
  expect_contains(what, {"[grad]", "at least one input", "test_grad.cpp:" + std::to_string(line)});
  line = __LINE__ + 1;
  what = error_of([&] { grad({c}, {x}); });
  expect_contains(what,
                  {"[grad]", "does not require grad", "test_grad.cpp:" + std::to_string(line)});
}

TEST(Grad, ReusedGraphWithRetainGraph) {
  Tensor x = leaf({2.0});
  Tensor y = exp(x);
  Tensor g1 = grad({y}, {x}, {}, true)[0];
  Tensor g2 = grad({y}, {x})[0];
  expect_values(g1, {std::exp(2.0)});
  expect_values(g2, {std::exp(2.0)});
}

}  // namespace
}  // namespace kiln
