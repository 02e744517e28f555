#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/pool.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_allclose;
using test::expect_error;

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
  expect_allclose(max_pool2d(select(x, 0, 1), {3, 2}, o), select(max_pool2d(x, {3, 2}, o), 0, 1),
                  0);
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
  expect_allclose(adaptive_avg_pool2d(r, 1), mean(r, {2, 3}, true), 1e-15);
  expect_allclose(adaptive_avg_pool2d(select(r, 0, 0), {3, 2}),
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
  expect_allclose(avg_pool2d(x32, 3, ao), avg_pool2d(x, 3, ao), 1e-6);
  expect_allclose(adaptive_avg_pool2d(x32, {4, 3}), adaptive_avg_pool2d(x, {4, 3}), 1e-6);
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

// --- the fast paths against a plain reference
// -----------------------------------------------------

// Small integers (many ties), NaN and -inf: the cases where the scan order and update rule matter.
std::vector<double> tie_heavy_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) {
    const uint32_t r = gen() % 64;
    x = r == 0   ? std::numeric_limits<double>::quiet_NaN()
        : r == 1 ? -std::numeric_limits<double>::infinity()
                 : static_cast<double>(static_cast<int>(r % 5) - 2);
  }
  return v;
}

// Max pooling written out directly from PyTorch's definition: every window cell in row-major
// order, padding skipped, `v > m || isnan(v)` replaces the running max; an all -inf window keeps
// its first cell.
void reference_max_pool(const std::vector<double>& x, int64_t planes, int64_t h, int64_t w, Size2 k,
                        const MaxPool2dOptions& o, int64_t oh, int64_t ow,
                        std::vector<double>& values, std::vector<int64_t>& indices) {
  const Size2 s = o.stride.value_or(k);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        double m = -std::numeric_limits<double>::infinity();
        int64_t best = -1;
        for (int64_t r = 0; r < k.h; ++r) {
          for (int64_t c = 0; c < k.w; ++c) {
            const int64_t ih = i * s.h - o.padding.h + r * o.dilation.h;
            const int64_t iw = j * s.w - o.padding.w + c * o.dilation.w;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const double v = x[static_cast<size_t>((p * h + ih) * w + iw)];
            if (best < 0) best = ih * w + iw;
            if (v > m || std::isnan(v)) {
              m = v;
              best = ih * w + iw;
            }
          }
        }
        values.push_back(m);
        indices.push_back(best);
      }
    }
  }
}

struct PoolCase {
  int64_t h, w;
  Size2 kernel;
  MaxPool2dOptions options;
};

TEST(MaxPool2d, FastPathsMatchTheReferenceWithTiesAndNans) {
  const std::vector<PoolCase> cases = {
      {28, 28, 2, {}},                         // the small CNN's first pooling
      {14, 14, 2, {}},                         // rows of 7 outputs
      {7, 9, 2, {}},                           // odd sizes drop the last row/column
      {7, 9, 2, {.ceil_mode = true}},          // ... or keep clipped windows
      {6, 42, 2, {}},                          // rows of 21: overlapping last block
      {9, 40, 2, {.padding = 1}},              // padded border
      {7, 9, 3, {.stride = 2, .padding = 1}},  // the ResNet stem's pooling
      {7, 9, 3, {.stride = 2, .padding = 1, .ceil_mode = true}},
      {16, 37, 3, {.stride = 2, .padding = 1}},                // rows of 18 outputs
      {5, 5, 3, {.stride = 2}},                                // a single interior output
      {2, 2, 2, {.padding = 1}},                               // no interior output at all
      {9, 11, {2, 3}, {.stride = Size2{1, 2}, .padding = 1}},  // any other size (dilation 1)
      {8, 8, {2, 2}, {.stride = Size2{3, 1}}},
      {9, 10, 3, {.stride = 2, .padding = 1, .dilation = 2}},  // the generic kernel
  };
  const int before = get_num_threads();
  uint32_t seed = 10;
  for (const PoolCase& pc : cases) {
    const int64_t planes = 64;  // enough for two threads at 28x28
    const std::vector<double> x = tie_heavy_values(planes * pc.h * pc.w, ++seed);
    for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
      for (int threads : {1, std::max(2, before)}) {
        set_num_threads(threads);
        const Tensor in = tensor(x, Shape{2, 32, pc.h, pc.w}, {dt});
        auto [v, i] = max_pool2d_with_indices(in, pc.kernel, pc.options);
        std::vector<double> want_v;
        std::vector<int64_t> want_i;
        reference_max_pool(x, planes, pc.h, pc.w, pc.kernel, pc.options, v.size(-2), v.size(-1),
                           want_v, want_i);
        const std::string what = "case " + std::to_string(pc.h) + "x" + std::to_string(pc.w) + " " +
                                 dtype_name(dt) + " threads " + std::to_string(threads);
        ASSERT_EQ(i.to_vector<int64_t>(), want_i) << what;
        const std::vector<double> got_v = v.to_vector<double>();
        ASSERT_EQ(got_v.size(), want_v.size()) << what;
        for (size_t k = 0; k < got_v.size(); ++k) {
          if (std::isnan(want_v[k]))
            EXPECT_TRUE(std::isnan(got_v[k])) << what << " at " << k;
          else
            EXPECT_EQ(got_v[k], want_v[k]) << what << " at " << k;
        }
      }
    }
  }
  set_num_threads(before);
}

// max_pool2d_backward adds grads in output order within each plane, so overlapping windows (the
// same index several times) sum in a fixed order: compare with that order in T itself.
template <class T>
void check_backward_against_reference(DType dt) {
  const int64_t planes = 2 * 16, oh = 6, ow = 7, h = 9, w = 8;
  std::mt19937 gen(7);
  std::vector<int64_t> idx(static_cast<size_t>(planes * oh * ow));
  std::vector<T> g(idx.size());
  std::uniform_real_distribution<double> u(-1, 1);
  for (size_t k = 0; k < idx.size(); ++k) {
    idx[k] = static_cast<int64_t>(gen() % 12);  // few distinct positions: many repeats
    g[k] = static_cast<T>(u(gen));
  }
  std::vector<T> want(static_cast<size_t>(planes * h * w), T(0));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t k = p * oh * ow; k < (p + 1) * oh * ow; ++k)
      want[static_cast<size_t>(p * h * w + idx[k])] += g[static_cast<size_t>(k)];
  const Tensor got = max_pool2d_backward(tensor(g, Shape{2, 16, oh, ow}, {dt}),
                                         tensor(idx, Shape{2, 16, oh, ow}), {h, w});
  EXPECT_EQ(got.to_vector<T>(), want) << dtype_name(dt);
}

TEST(MaxPool2d, BackwardScattersInOutputOrder) {
  check_backward_against_reference<float>(DType::Float32);
  check_backward_against_reference<double>(DType::Float64);
}

TEST(MaxPool2d, BackwardNamesTheFirstBadIndexWhateverTheThreads) {
  // 65536 indices: parallel checks split them into several chunks.
  const Shape shape{4, 64, 16, 16};
  const int64_t n = 4 * 64 * 16 * 16;
  const int before = get_num_threads();
  for (int threads : {1, std::max(2, before)}) {
    set_num_threads(threads);
    auto run = [&](std::vector<std::pair<int64_t, int64_t>> bad) {
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) idx[static_cast<size_t>(k)] = (k * 37) % 1024;
      for (auto [pos, value] : bad) idx[static_cast<size_t>(pos)] = value;
      return max_pool2d_backward(ones(shape), tensor(idx, shape), 32);
    };
    expect_error(
        [&] {
          run({{60000, 1024}, {40000, -1}});
        },
        {"[max_pool2d_backward]", "indices in [0, 1024)", "got -1 at position 40000",
         "test_pool.cpp"});
    expect_error(
        [&] {
          run({{100, 5000}, {40000, -1}, {65535, 1024}});
        },
        {"got 5000 at position 100"});
    expect_error([&] { run({{65535, 1024}}); }, {"got 1024 at position 65535"});
    EXPECT_EQ(sum(run({})).item(), static_cast<double>(n));
  }
  set_num_threads(before);
}

// Note [channels-last max pooling]: a channels-last input is pooled where it lies; values and
// indices equal the planar kernel's bit for bit, ties, NaNs, padding, dilation and ceil mode
// included.
TEST(MaxPool, ChannelsLastInputGivesThePlanarResultsExactly) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> pick(0, 5);
  std::vector<float> v(2 * 19 * 9 * 11);
  for (float& x : v) x = static_cast<float>(pick(gen));  // many ties
  v[5] = v[300] = v[301] = std::numeric_limits<float>::quiet_NaN();
  v[777] = -std::numeric_limits<float>::infinity();
  const Tensor x = tensor<float>(v, Shape{2, 19, 9, 11});
  const Tensor x_last = contiguous(x, MemoryFormat::kChannelsLast);
  ASSERT_FALSE(x_last.is_contiguous());
  for (const MaxPool2dOptions& o :
       {MaxPool2dOptions{}, MaxPool2dOptions{.stride = 2, .padding = 1, .ceil_mode = true},
        MaxPool2dOptions{.stride = Size2{1, 2}, .padding = 1, .dilation = 2}}) {
    for (Size2 k : {Size2{2}, Size2{3}, Size2{2, 3}}) {
      auto [want, want_i] = max_pool2d_with_indices(x, k, o);
      auto [got, got_i] = max_pool2d_with_indices(x_last, k, o);
      const std::vector<float> a = want.to_vector<float>(), b = got.to_vector<float>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) << i;
      EXPECT_EQ(want_i.to_vector<int64_t>(), got_i.to_vector<int64_t>());
    }
  }
}

}  // namespace
}  // namespace kiln
