#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/pool.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/registry.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

template <class F>
void expect_error(F fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    std::string what = e.what();
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what;
  }
}

void expect_close(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << "at " << i;
}

using Values = std::vector<double>;
using Indices = std::vector<int64_t>;

// [1, 1, h, w] holding 0, 1, 2, ... in row-major order.
Tensor grid(int64_t h, int64_t w, DType dt = DType::Float32) {
  return arange(0, static_cast<double>(h * w), 1, TensorOptions{dt}).reshape({1, 1, h, w});
}

TEST(MaxPool2d, ValuesAndFlatIndices) {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    auto [v, i] = max_pool2d_with_indices(grid(4, 4, dt), 2);
    EXPECT_EQ(v.dtype(), dt);
    EXPECT_EQ(i.dtype(), DType::Int64);
    EXPECT_EQ(v.to_vector<double>(), (Values{5, 7, 13, 15}));
    EXPECT_EQ(i.to_vector<int64_t>(), (Indices{5, 7, 13, 15}));
    EXPECT_EQ(max_pool2d(grid(4, 4, dt), 2).to_vector<double>(), (Values{5, 7, 13, 15}));
  }
  // Padding never wins; ceil_mode adds a last window that starts in the input (rows 3..4).
  auto [v, i] =
      max_pool2d_with_indices(neg(grid(4, 4)), 2, {.stride = 2, .padding = 1, .ceil_mode = true});
  EXPECT_EQ(v.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(i.to_vector<int64_t>(), (Indices{0, 1, 3, 4, 5, 7, 12, 13, 15}));
  EXPECT_EQ(v.to_vector<double>(), (Values{0, -1, -3, -4, -5, -7, -12, -13, -15}));
}

TEST(MaxPool2d, DilationNanAndUnbatched) {
  // Window (i, j) reads rows i, i + 2, i + 4 and the same columns: its max is at (i + 4, j + 4).
  Tensor d = max_pool2d(grid(7, 7), 3, {.stride = 1, .dilation = 2});
  EXPECT_EQ(d.to_vector<double>(), (Values{32, 33, 34, 39, 40, 41, 46, 47, 48}));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto [v, i] = max_pool2d_with_indices(tensor({1, nan, 3, 4}).reshape({1, 1, 2, 2}), 2);
  EXPECT_TRUE(std::isnan(v.item()));
  EXPECT_EQ(i.item<int64_t>(), 1);
  Tensor x = sample_tensor({2, 3, 6, 5}, 1);
  const MaxPool2dOptions o{.stride = Size2{2, 1}, .padding = 1, .ceil_mode = true};
  expect_close(max_pool2d(select(x, 0, 1), {3, 2}, o), select(max_pool2d(x, {3, 2}, o), 0, 1), 0);
}

TEST(MaxPool2d, GradientGoesToTheArgmaxOfEveryWindow) {
  // The centre is the max of all four overlapping windows.
  Tensor x = tensor({0, 1, 2, 3, 9, 4, 5, 6, 7}, {DType::Float64}).reshape({1, 1, 3, 3});
  x.set_requires_grad(true);
  max_pool2d(x, 2, {.stride = 1}).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (Values{0, 0, 0, 0, 4, 0, 0, 0, 0}));
  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{max_pool2d(in[0], 3, {.stride = 2, .padding = 1})};
  };
  EXPECT_TRUE(gradgradcheck(f, {sample_tensor({1, 2, 5, 5}, 2)}));
}

TEST(AvgPool2d, PaddingCountAndDivisorOverride) {
  Tensor x = ones({1, 1, 2, 2});
  EXPECT_EQ(avg_pool2d(x, 2, {.stride = 1, .padding = 1}).to_vector<double>(),
            (Values{0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25}));
  EXPECT_EQ(
      avg_pool2d(x, 2, {.stride = 1, .padding = 1, .count_include_pad = false}).to_vector<double>(),
      Values(9, 1.0));
  EXPECT_EQ(
      avg_pool2d(x, 2, {.stride = 1, .padding = 1, .divisor_override = 2}).to_vector<double>(),
      (Values{0.5, 1, 0.5, 1, 2, 1, 0.5, 1, 0.5}));
}

TEST(AvgPool2d, CeilModeDividesByTheClippedWindow) {
  // PyTorch divides the last window by the cells inside input + padding, not the full kernel.
  EXPECT_EQ(avg_pool2d(ones({1, 1, 5, 5}), 2, {.ceil_mode = true}).to_vector<double>(),
            Values(9, 1.0));
  Tensor y = avg_pool2d(grid(5, 5, DType::Float64), 2, {.ceil_mode = true});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(y.to_vector<double>()[2], (4 + 9) / 2.0);
  EXPECT_EQ(y.to_vector<double>()[8], 24);
}

TEST(AdaptiveAvgPool2d, UnevenAndLargerOutputs) {
  Tensor x = tensor({1, 2, 3, 4, 5}).reshape({1, 1, 1, 5});
  // Windows [0, 2), [1, 4), [3, 5).
  EXPECT_EQ(adaptive_avg_pool2d(x, {1, 3}).to_vector<double>(), (Values{1.5, 3, 4.5}));
  // Windows [0, 1), [0, 2), [1, 2).
  Tensor two = tensor({1, 2}).reshape({1, 1, 1, 2});
  EXPECT_EQ(adaptive_avg_pool2d(two, {1, 3}).to_vector<double>(), (Values{1, 1.5, 2}));
  Tensor r = sample_tensor({2, 3, 4, 5}, 3);
  expect_close(adaptive_avg_pool2d(r, 1), mean(r, {2, 3}, true), 1e-15);
  expect_close(adaptive_avg_pool2d(select(r, 0, 0), {3, 2}),
               select(adaptive_avg_pool2d(r, {3, 2}), 0, 0), 0);
}

// Each backward op is the transpose of its pooling: <g, pool(x)> = <pool_backward(g), x>.
TEST(Pool, BackwardOpsAreTransposesAndTwiceDifferentiable) {
  Tensor x = sample_tensor({2, 3, 7, 6}, 4);
  const AvgPool2dOptions o{
      .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false};
  Tensor y = avg_pool2d(x, 3, o);
  Tensor g = sample_tensor(y.shape(), 5);
  EXPECT_NEAR(sum(mul(g, y)).item(), sum(mul(avg_pool2d_backward(g, {7, 6}, 3, o), x)).item(),
              1e-12);
  Tensor a = adaptive_avg_pool2d(x, {3, 4});
  Tensor ga = sample_tensor(a.shape(), 6);
  EXPECT_NEAR(sum(mul(ga, a)).item(), sum(mul(adaptive_avg_pool2d_backward(ga, {7, 6}), x)).item(),
              1e-12);
  auto avg = [o](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{avg_pool2d(in[0], 3, o)};
  };
  auto adaptive = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{adaptive_avg_pool2d(in[0], {2, 3})};
  };
  EXPECT_TRUE(gradgradcheck(avg, {sample_tensor({1, 2, 5, 4}, 7)}));
  EXPECT_TRUE(gradgradcheck(adaptive, {sample_tensor({1, 2, 5, 4}, 8)}));
}

TEST(Pool, StridedInputsAndThreadCount) {
  Tensor x = sample_tensor({4, 8, 9, 10}, 9);
  Tensor view = permute(contiguous(permute(x, {0, 2, 3, 1})), {0, 3, 1, 2});
  ASSERT_FALSE(view.is_contiguous());
  const MaxPool2dOptions mo{.padding = 1, .ceil_mode = true};
  const AvgPool2dOptions ao{.stride = 2, .padding = 1};
  auto run = [&](const Tensor& in) {
    return std::vector<Tensor>{max_pool2d_with_indices(in, 3, mo).second,
                               max_pool2d(in, 3, mo),
                               avg_pool2d(in, 3, ao),
                               adaptive_avg_pool2d(in, {4, 3}),
                               avg_pool2d_backward(in, {17, 20}, 3, ao),
                               adaptive_avg_pool2d_backward(in, {13, 11})};
  };
  const int before = get_num_threads();
  set_num_threads(1);
  std::vector<Tensor> one = run(x);
  set_num_threads(std::max(2, before));
  std::vector<Tensor> many = run(x), strided = run(view);
  set_num_threads(before);
  for (size_t k = 0; k < one.size(); ++k) {
    EXPECT_EQ(one[k].to_vector<double>(), many[k].to_vector<double>()) << "output " << k;
    EXPECT_EQ(strided[k].to_vector<double>(), many[k].to_vector<double>()) << "output " << k;
  }
  // float32 agrees with float64.
  Tensor x32 = to_dtype(x, DType::Float32);
  expect_close(avg_pool2d(x32, 3, ao), avg_pool2d(x, 3, ao), 1e-6);
  expect_close(adaptive_avg_pool2d(x32, {4, 3}), adaptive_avg_pool2d(x, {4, 3}), 1e-6);
}

TEST(Pool, MetaTensorsInferShapes) {
  Tensor m = empty({8, 3, 28, 28}, {DType::Float32, kMeta});
  auto [v, i] = max_pool2d_with_indices(m, 3, {.stride = 2, .padding = 1, .ceil_mode = true});
  EXPECT_EQ(v.shape(), (Shape{8, 3, 15, 15}));
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(avg_pool2d(m, 2).shape(), (Shape{8, 3, 14, 14}));
  EXPECT_EQ(adaptive_avg_pool2d(m, {5, 7}).shape(), (Shape{8, 3, 5, 7}));
}

TEST(Pool, ErrorsNameTheOpShapesAndCaller) {
  const std::string file = "test_pool.cpp";
  expect_error(
      [] {
        max_pool2d(empty({28, 28}), 2);
      },
      {"[max_pool2d] expected input of rank 3 (C,H,W) or 4 (N,C,H,W)", "[28, 28]", file});
  expect_error(
      [] {
        max_pool2d(empty({1, 1, 6, 6}), 3, {.padding = 2});
      },
      {"[max_pool2d]", "padding between 0 and half the kernel size", "[2, 2]", file});
  expect_error(
      [] {
        max_pool2d_with_indices(empty({1, 1, 2, 2}), 3);
      },
      {"[max_pool2d_with_indices]", "output of at least 1x1", "float32[1, 1, 2, 2]", file});
  expect_error(
      [] {
        max_pool2d(empty({1, 0, 4, 4}), 2);
      },
      {"[max_pool2d]", "non-empty C, H and W", file});
  expect_error(
      [] {
        max_pool2d(empty({1, 1, 4, 4}), 2, {.stride = 0});
      },
      {"[max_pool2d]", "positive stride", file});
  expect_error(
      [] {
        avg_pool2d(empty({1, 1, 4, 4}, {DType::Int64}), 2);
      },
      {"[avg_pool2d]", "floating-point input", "int64[1, 1, 4, 4]", file});
  expect_error(
      [] {
        avg_pool2d(empty({1, 1, 4, 4}), 2, {.divisor_override = 0});
      },
      {"[avg_pool2d]", "non-zero divisor_override", file});
  expect_error(
      [] {
        adaptive_avg_pool2d(empty({1, 1, 4, 4}), {0, 2});
      },
      {"[adaptive_avg_pool2d]", "positive output_size", "[1, 1, 4, 4]", file});
  expect_error(
      [] {
        avg_pool2d_backward(empty({1, 1, 3, 3}), 4, 2);
      },
      {"[avg_pool2d_backward]", "grad of spatial size 2x2", "[1, 1, 3, 3]", file});
  expect_error(
      [] {
        max_pool2d_backward(ones({1, 1, 2, 2}), tensor<int64_t>({0, 1, 2, 16}, Shape{1, 1, 2, 2}),
                            4);
      },
      {"[max_pool2d_backward]", "indices in [0, 16)", "got 16 at position 3", file});
  expect_error(
      [] {
        max_pool2d_backward(ones({1, 1, 2, 2}), ones({1, 1, 2, 2}), 4);
      },
      {"[max_pool2d_backward]", "int64 indices", "float32[1, 1, 2, 2]", file});
}

}  // namespace
}  // namespace kiln
