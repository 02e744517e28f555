// Anomaly mode (DetectAnomalyGuard): NaN/Inf in forward outputs and in gradients.
#include <gtest/gtest.h>

#include "tests/support/test_util.h"

#include <cmath>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/function.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;
using test::leaf;

std::string here(int line) {
  return "test_anomaly.cpp:" + std::to_string(line);
}

TEST(Anomaly, GuardIsScopedAndOffByDefault) {
  EXPECT_FALSE(AnomalyMode::is_enabled());
  {
    DetectAnomalyGuard guard;
    EXPECT_TRUE(AnomalyMode::is_enabled());
    {
      DetectAnomalyGuard nested;
      EXPECT_TRUE(AnomalyMode::is_enabled());
    }
    EXPECT_TRUE(AnomalyMode::is_enabled());
  }
  EXPECT_FALSE(AnomalyMode::is_enabled());
}

TEST(Anomaly, ForwardNaNNamesTheOpAndLine) {
  Tensor x = tensor({1.0, -1.0}, {DType::Float64});
  // Without the guard a NaN is just a value.
  Tensor quiet = log(x);
  EXPECT_TRUE(std::isnan(quiet.to_vector<double>()[1]));
  DetectAnomalyGuard guard;
  int line = __LINE__ + 1;
  std::string what = error_of([&] { log(x); });
  expect_contains(what, {"[log]", "anomaly detected", "NaN", "float64[2] on cpu", here(line)});
  // Finite results pass.
  EXPECT_NO_THROW(log(tensor({1.0, 2.0}, {DType::Float64})));
  // Inf is an anomaly too.
  line = __LINE__ + 1;
  what = error_of([&] { div(tensor({1.0}, {DType::Float64}), 0.0); });
  expect_contains(what, {"[div]", "Inf", here(line)});
}

TEST(Anomaly, BackwardNaNNamesTheOpAndItsForwardLine) {
  Tensor x = leaf({0.0, 4.0});
  int line = __LINE__ + 1;
  Tensor y = sqrt(x);  // finite forward; gradient 1 / (2 sqrt(0)) = inf
  Tensor loss = sum(y);
  {
    // Without the guard the infinite gradient is simply stored.
    loss.backward({}, true);
    EXPECT_TRUE(std::isinf(x.grad().to_vector<double>()[0]));
    EXPECT_DOUBLE_EQ(x.grad().to_vector<double>()[1], 0.25);
  }
  DetectAnomalyGuard guard;
  std::string what = error_of([&] { loss.backward(); });
  expect_contains(what, {"anomaly detected", "'sqrt'", here(line)});
}

TEST(Anomaly, BackwardNaNFromZeroTimesInf) {
  // d/dx (x * log(x)) at 0: log(0) = -inf in forward already, so use the gradient only:
  // y = pow(x, 0.5) * 0 has a finite forward (0) and a NaN gradient (0 * inf).
  Tensor x = leaf({0.0});
  int line = __LINE__ + 1;
  Tensor y = pow(x, 0.5);
  Tensor loss = sum(mul(y, 0.0));
  DetectAnomalyGuard guard;
  std::string what = error_of([&] { loss.backward(); });
  expect_contains(what, {"anomaly detected", "'pow_scalar'", here(line)});
}

struct NanGrad : autograd::Function<NanGrad> {
  static constexpr const char* kName = "nan_grad";
  static std::vector<Tensor> forward(autograd::FunctionCtx&, const std::vector<Tensor>& in) {
    return {mul(in[0], 1.0)};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, const std::vector<Tensor>& grads) {
    Tensor g = kiln::clone(grads[0]);
    g.fill_(std::nan(""));  // written directly, not by an op that anomaly mode checks
    return {g};
  }
};

TEST(Anomaly, BackwardNaNFromACustomFunction) {
  Tensor x = leaf({1.0});
  int line = __LINE__ + 1;
  Tensor y = NanGrad::apply({x})[0];
  DetectAnomalyGuard guard;
  std::string what = error_of([&] { sum(y).backward(); });
  expect_contains(what, {"anomaly detected", "'nan_grad'", "NaN", here(line)});
}

TEST(Anomaly, CleanBackwardPassesUnderTheGuard) {
  DetectAnomalyGuard guard;
  Tensor x = leaf({1.0, 2.0});
  sum(mul(exp(x), x)).backward();
  std::vector<double> g = x.grad().to_vector<double>();
  EXPECT_NEAR(g[0], std::exp(1.0) * 2.0, 1e-12);
  EXPECT_NEAR(g[1], std::exp(2.0) * 3.0, 1e-12);
}

}  // namespace
}  // namespace kiln
