#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using test::expect_error;

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

void expect_near(const Tensor& t, const std::vector<double>& want, double tol = 1e-6) {
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]))
      EXPECT_EQ(got[i], want[i]) << "element " << i;
    else
      EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
  }
}

// 1..6 as a 2x3 float32 matrix.
Tensor m23() {
  return tensor<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
}

TEST(Reduce, SumValuesAndShapes) {
  Tensor x = m23();
  Tensor all = sum(x);
  EXPECT_EQ(all.shape(), Shape{});
  EXPECT_EQ(all.item(), 21.0);
  expect_near(sum(x, {0}), {5, 7, 9});
  Tensor rows = sum(x, {1}, true);
  EXPECT_EQ(rows.shape(), (Shape{2, 1}));
  expect_near(rows, {6, 15});
  EXPECT_EQ(sum(x, {-1, -2}).item(), 21.0);
  EXPECT_EQ(sum(x, {}, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(x.sum().item(), 21.0);
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(sum(s, {0}, true).shape(), Shape{});
  EXPECT_EQ(sum(s, {-1}).item(), 2.5);
}

TEST(Reduce, SumDtypes) {
  EXPECT_EQ(sum(m23()).dtype(), DType::Float32);
  Tensor i = tensor<int32_t>({1, 2, 3});
  EXPECT_EQ(sum(i).dtype(), DType::Int64);
  EXPECT_EQ(sum(i).item<int64_t>(), 6);
  Tensor b = tensor<bool>({true, false, true, true});
  EXPECT_EQ(sum(b).dtype(), DType::Int64);
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
  Tensor h = full({100}, 0.5, TensorOptions{DType::Float16});
  EXPECT_EQ(sum(h).dtype(), DType::Float16);
  EXPECT_EQ(sum(h).item(), 50.0);
  EXPECT_EQ(prod(tensor<int64_t>({2, 3, 4})).item<int64_t>(), 24);
  EXPECT_EQ(prod(b).dtype(), DType::Int64);
  EXPECT_EQ(max(tensor<int32_t>({-3, 7, 2}, std::nullopt, TensorOptions{DType::Int8})).dtype(),
            DType::Int8);
  EXPECT_EQ(max(tensor<int32_t>({-3, 7, 2}, std::nullopt, TensorOptions{DType::Int8})).item(), 7.0);
}

TEST(Reduce, NonContiguousInputs) {
  Tensor base = sample_tensor({4, 6, 5}, 3);
  Tensor views[] = {transpose(base, 0, 2), slice(base, 1, 1, 6, 2), select(base, 2, 3),
                    expand(sample_tensor({4, 1, 5}, 4), {4, 6, 5})};
  for (const Tensor& v : views) {
    Tensor c = clone(v);
    for (Dims dims : {Dims{0}, Dims{-1}, Dims{}, Dims{0, 1}}) {
      expect_near(sum(v, dims), values(sum(c, dims)), 1e-12);
      expect_near(max(v, dims, true), values(max(c, dims, true)), 0);
      expect_near(prod(v, dims), values(prod(c, dims)), 1e-12);
    }
    expect_near(argmin(v, 0), values(argmin(c, 0)), 0);
  }
}

// Note [deterministic reduction] in kiln/backend/cpu/reduce_kernels.cpp: results are bitwise equal
// whatever the thread count, on both the per-output and the blocked path.
TEST(Reduce, IndependentOfThreadCount) {
  Tensor x = to_dtype(sample_tensor({300, 257}, 5), DType::Float32);
  const int threads = get_num_threads();
  std::vector<std::vector<double>> runs;
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    for (Dims dims : {Dims{0}, Dims{1}, Dims{}}) runs.push_back(values(sum(x, dims)));
  }
  set_num_threads(threads);
  for (size_t i = 3; i < runs.size(); ++i) EXPECT_EQ(runs[i], runs[i % 3]);
  // The blocked path (dim 0) and a per-output path (a transposed copy, dim 1) agree bitwise.
  EXPECT_EQ(values(sum(x, {0})), values(sum(contiguous(transpose(x, 0, 1)), {1})));
}

TEST(Reduce, EmptyReductions) {
  Tensor e = zeros({2, 0});
  expect_near(sum(e, {1}), {0, 0});
  expect_near(prod(e, {1}), {1, 1});
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(max(e, {0}).shape(), Shape{0});
  expect_error([&] { max(e, {1}); }, {"[max]", "dim 1 of size 0", "float32[2, 0]"});
  expect_error([&] { argmax(e); }, {"[argmax]", "float32[2, 0]", "test_reduce.cpp"});
}

TEST(Reduce, MeanValuesAndErrors) {
  expect_near(mean(m23(), {1}), {2, 5});
  expect_near(mean(m23(), {0, 1}, true), {3.5});
  Tensor h = tensor<float>({1, 2, 3, 4}, std::nullopt, TensorOptions{DType::BFloat16});
  EXPECT_EQ(mean(h).dtype(), DType::BFloat16);
  EXPECT_EQ(mean(h).item(), 2.5);
  expect_error(
      [] {
        mean(tensor<int64_t>({1, 2}, Shape{2, 1}));
      },
      {"[mean]", "floating-point", "int64[2, 1]", "test_reduce.cpp"});
}

TEST(Reduce, ProdAndZeroSafeGradient) {
  expect_near(prod(m23(), {1}), {6, 120});
  Tensor x = tensor<double>({2, 0, 3, 0, 0, 5, 1, 2, 4}, Shape{3, 3}).set_requires_grad(true);
  Tensor g = grad({sum(prod(x, {1}))}, {x})[0];
  // No zero: y / x; one zero: only it gets the product of the others; two: all zero.
  expect_near(g, {0, 6, 0, 0, 0, 0, 8, 4, 2});
  GradcheckOptions o;
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return std::vector{prod(in[0], {1})}; },
                        {tensor<double>({2, 0, 3, 0, 0, 5, 1, 2, 4}, Shape{3, 3})}));
  EXPECT_TRUE(
      gradgradcheck([](const std::vector<Tensor>& in) { return std::vector{prod(in[0], {0})}; },
                    {sample_tensor({3, 2}, 9, 0.5, 1.5)}));
}

TEST(Reduce, MaxMinValuesNanAndTies) {
  Tensor x = tensor<float>({3, -1, 7, 2, 9, 0}, Shape{2, 3});
  expect_near(max(x, {1}), {7, 9});
  expect_near(min(x, {0}), {2, -1, 0});
  expect_near(max(x), {9});
  Tensor n = tensor<double>({1, NAN, 3});
  EXPECT_TRUE(std::isnan(max(n).item()));
  EXPECT_TRUE(std::isnan(min(n).item()));
  expect_near(max(tensor<double>({-kInf, -kInf})), {-kInf});
  // Ties share the gradient evenly, like torch.amax.
  Tensor t = tensor<double>({1, 4, 4, 4, 0, 2}, Shape{2, 3}).set_requires_grad(true);
  expect_near(grad({sum(max(t, {1}))}, {t})[0], {0, 0.5, 0.5, 1, 0, 0});
  expect_near(grad({max(t)}, {t})[0], {0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0});
}

TEST(Reduce, ArgmaxArgmin) {
  Tensor x = tensor<float>({3, 9, 9, 2, 1, 1}, Shape{2, 3});
  Tensor a = argmax(x, 1);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));  // first of the tied 9s
  EXPECT_EQ(argmin(x, -1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(argmin(x, -1).to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);  // flattened
  EXPECT_EQ(argmin(x).item<int64_t>(), 4);
  EXPECT_EQ(argmax(x, std::nullopt, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(argmax(transpose(x, 0, 1)).item<int64_t>(), 2);  // flattened in logical order
  EXPECT_EQ(argmax(tensor<double>({1, NAN, 5, NAN})).item<int64_t>(), 1);
  EXPECT_EQ(argmax(tensor<int32_t>({4, -2, 8}), 0).item<int64_t>(), 2);
  Tensor r = sample_tensor({3}, 1).set_requires_grad(true);
  EXPECT_FALSE(argmax(r).requires_grad());
}

TEST(Reduce, VarStd) {
  Tensor x = tensor<double>({1, 2, 3, 4, 2, 2, 2, 2}, Shape{2, 4});
  expect_near(var(x, {1}), {5.0 / 3, 0});
  expect_near(var(x, {1}, 0), {1.25, 0});
  expect_near(std(x, {1}, 0, true), {std::sqrt(1.25), 0});
  expect_near(var(x), {5.5 / 7});
  EXPECT_EQ(var(x, {0}, 1, true).shape(), (Shape{1, 4}));
  // N - correction <= 0 divides by zero, like PyTorch.
  EXPECT_TRUE(std::isinf(var(tensor<double>({1, 2}), {}, 2).item()));
  EXPECT_TRUE(std::isnan(var(tensor<double>({3}), {}, 1).item()));
  expect_error([] { var(tensor<int32_t>({1, 2})); }, {"[var]", "int32[2]", "test_reduce.cpp"});
  expect_error([] { std(tensor<int32_t>({1, 2})); }, {"[std]", "int32[2]"});
}

TEST(Reduce, Logsumexp) {
  Tensor x = tensor<double>({0, std::log(3.0), 1000, 1000, -kInf, -kInf}, Shape{3, 2});
  expect_near(logsumexp(x, {1}), {std::log(4.0), 1000 + std::log(2.0), -kInf}, 1e-9);
  EXPECT_EQ(logsumexp(x, {0, 1}, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(logsumexp(tensor<int64_t>({1, 2}), {0}).dtype(), DType::Float32);
  expect_near(logsumexp(zeros({2, 0}), {1}), {-kInf, -kInf});
  Tensor g = sample_tensor({2, 3}, 7).set_requires_grad(true);
  Tensor d = grad({sum(logsumexp(g, {1}))}, {g})[0];
  expect_near(sum(d, {1}), {1, 1}, 1e-12);  // the gradient is a softmax
}

TEST(Reduce, Norm) {
  Tensor x = tensor<double>({3, -4, 0, 1, -1, 2}, Shape{2, 3});
  expect_near(norm(x, 2, {1}), {5, std::sqrt(6.0)});
  expect_near(norm(x, 1, {1}), {7, 4});
  expect_near(norm(x, kInf, {1}), {4, 2});
  expect_near(norm(x, -kInf, {1}), {0, 1});
  expect_near(norm(x, 0, {1}), {2, 3});
  expect_near(norm(x, 3, {}, true), {std::cbrt(27 + 64 + 1 + 1 + 8)}, 1e-9);
  expect_error([] { norm(tensor<int64_t>({1})); }, {"[norm]", "int64[1]"});
}

TEST(Reduce, SumTo) {
  Tensor x = sample_tensor({2, 3, 4}, 8);
  EXPECT_TRUE(sum_to(x, {2, 3, 4}).is_same(x));
  Tensor a = sum_to(x, {3, 1});
  EXPECT_EQ(a.shape(), (Shape{3, 1}));
  expect_near(a, values(sum(x, {0, 2})), 1e-12);
  EXPECT_EQ(sum_to(x, {1, 1, 4}).shape(), (Shape{1, 1, 4}));
  EXPECT_EQ(sum_to(x, {}).shape(), Shape{});
  expect_near(sum_to(x, {}), {sum(x).item()}, 1e-12);
  expect_error([&] { sum_to(x, {3}); }, {"[sum_to]", "[3]", "float64[2, 3, 4]", "test_reduce.cpp"});
  expect_error([&] { sum_to(x, {5, 2, 3, 4}); }, {"[sum_to]", "[5, 2, 3, 4]"});
}

TEST(Reduce, DimErrors) {
  Tensor x = m23();
  expect_error(
      [&] {
        sum(x, {1, -1});
      },
      {"[sum]", "dim 1 twice", "float32[2, 3]", "test_reduce.cpp"});
  expect_error([&] { mean(x, {2}); }, {"[mean]", "dim 2", "test_reduce.cpp"});
  expect_error([&] { max(x, {0, 0}); }, {"[max]", "dim 0 twice"});
  expect_error([&] { argmin(x, 5); }, {"[argmin]", "dim 5"});
  expect_error([&] { logsumexp(x, {-3}); }, {"[logsumexp]", "dim -3"});
}

TEST(Reduce, Gradients) {
  // Sum, mean and max are piecewise linear: their gradient has no gradient to check.
  auto check = [](Tensor (*f)(const Tensor&, const Dims&, bool, const Loc&), Dims dims,
                  bool second_order) {
    auto fn = [=](const std::vector<Tensor>& in) {
      return std::vector{f(in[0], dims, false, Loc::current())};
    };
    Tensor x = sample_tensor({3, 4}, 12, 0.5, 1.5);
    EXPECT_TRUE(gradcheck(fn, {x}));
    if (second_order) {
      EXPECT_TRUE(gradgradcheck(fn, {x}));
    }
  };
  check(&sum, {0}, false);
  check(&mean, {-1}, false);
  check(&max, {1}, false);
  check(&prod, {}, true);
  auto v = [](const std::vector<Tensor>& in) { return std::vector{var(in[0], {1}, 1, true)}; };
  EXPECT_TRUE(gradgradcheck(v, {sample_tensor({3, 4}, 13)}));
  auto l = [](const std::vector<Tensor>& in) { return std::vector{logsumexp(in[0], {0})}; };
  EXPECT_TRUE(gradgradcheck(l, {sample_tensor({3, 4}, 14)}));
}

}  // namespace
}  // namespace kiln
