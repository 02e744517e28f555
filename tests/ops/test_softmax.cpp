#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/softmax_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using test::expect_error;

void expect_near(const Tensor& t, const std::vector<double>& want, double tol) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]))
      EXPECT_EQ(got[i], want[i]) << "element " << i;
    else
      EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
  }
}

void expect_close(const Tensor& a, const Tensor& b, double tol) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.dtype(), b.dtype());
  expect_near(a, b.to_vector<double>(), tol);
}

TEST(Softmax, HandComputedValues) {
  Tensor x = tensor<float>({1, 2, 3});
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  expect_near(softmax(x, 0), {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z}, 1e-6);
  expect_near(log_softmax(x, -1), {1 - std::log(z), 2 - std::log(z), 3 - std::log(z)}, 1e-6);
  EXPECT_EQ(softmax(x, 0).dtype(), DType::Float32);
  Tensor rows = softmax(sample_tensor({4, 7}, 1, -3, 3), 1);
  expect_near(sum(rows, {1}), std::vector<double>(4, 1.0), 1e-12);
  Tensor s = scalar_tensor(4.0);
  expect_near(softmax(s, 0), {1.0}, 0);
  expect_near(log_softmax(s, -1), {0.0}, 0);
}

// The fused kernels agree with the reference decompositions exp(x - logsumexp) and
// x - logsumexp, over dims, layouts and dtypes.
TEST(Softmax, MatchesReferenceDecomposition) {
  Tensor base = sample_tensor({3, 4, 5}, 2, -4, 4);
  Tensor inputs[] = {base, transpose(base, 0, 2), slice(base, 1, 0, 4, 2),
                     to_dtype(base, DType::Float32)};
  for (const Tensor& x : inputs) {
    double tol = x.dtype() == DType::Float32 ? 1e-6 : 1e-12;
    for (int64_t dim : {0, 1, 2, -1}) {
      expect_close(softmax(x, dim), reference::softmax(x, dim), tol);
      expect_close(log_softmax(x, dim), reference::log_softmax(x, dim), tol * 10);
    }
  }
  Tensor h = to_dtype(base, DType::BFloat16);
  expect_close(softmax(h, 1), reference::softmax(h, 1), 1e-2);
}

TEST(Softmax, GradientMatchesReference) {
  for (bool log : {false, true}) {
    Tensor x = sample_tensor({3, 5}, 3).set_requires_grad(true);
    Tensor w = sample_tensor({3, 5}, 4);
    Tensor fused = log ? log_softmax(x, 0) : softmax(x, 0);
    Tensor ref = log ? reference::log_softmax(x, 0) : reference::softmax(x, 0);
    Tensor g_fused = grad({sum(mul(fused, w))}, {x})[0];
    Tensor g_ref = grad({sum(mul(ref, w))}, {x})[0];
    expect_close(g_fused, g_ref, 1e-12);
  }
}

TEST(Softmax, ExtremeValues) {
  Tensor big = tensor<float>({1000, 1001, -1000});
  std::vector<double> y = softmax(big, 0).to_vector<double>();
  EXPECT_NEAR(y[0], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(y[2], 0, 1e-30);
  expect_near(
      log_softmax(big, 0),
      {-std::log1p(std::exp(1.0)), -std::log1p(std::exp(-1.0)), -2001 - std::log1p(std::exp(-1.0))},
      1e-3);
  Tensor masked = tensor<double>({0, -kInf, 0, -kInf});
  expect_near(softmax(masked, 0), {0.5, 0, 0.5, 0}, 1e-12);
  expect_near(log_softmax(masked, 0), {-std::log(2.0), -kInf, -std::log(2.0), -kInf}, 1e-12);
  EXPECT_TRUE(std::isnan(softmax(tensor<double>({1, NAN}), 0).to_vector<double>()[0]));
}

TEST(Softmax, Errors) {
  expect_error(
      [] {
        softmax(tensor<int64_t>({1, 2}, Shape{1, 2}), 1);
      },
      {"[softmax]", "floating-point", "int64[1, 2]", "test_softmax.cpp"});
  expect_error(
      [] {
        log_softmax(zeros({2, 3}), 2);
      },
      {"[log_softmax]", "dim 2", "test_softmax.cpp"});
}

TEST(Softmax, Gradcheck) {
  for (int64_t dim : {0, -1}) {
    auto s = [dim](const std::vector<Tensor>& in) { return std::vector{softmax(in[0], dim)}; };
    auto l = [dim](const std::vector<Tensor>& in) { return std::vector{log_softmax(in[0], dim)}; };
    Tensor x = sample_tensor({3, 4}, 5, -2, 2);
    EXPECT_TRUE(gradcheck(s, {x}));
    EXPECT_TRUE(gradcheck(l, {x}));
    EXPECT_TRUE(gradgradcheck(s, {x}));
    EXPECT_TRUE(gradgradcheck(l, {x}));
  }
}

}  // namespace
}  // namespace kiln
