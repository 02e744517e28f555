#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_allclose;
using test::expect_error;

Tensor f32(const Tensor& t) {
  return to_dtype(t, DType::Float32);
}

TEST(Conv2d, HandComputedValues) {
  // w picks x[i][j] + x[i+1][j+1].
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9}, {dt}).reshape({1, 1, 3, 3});
    Tensor w = tensor({1, 0, 0, 1}, {dt}).reshape({1, 1, 2, 2});
    Tensor y = conv2d(x, w, tensor({1}, {dt}));
    EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{7, 9, 13, 15}));
    // Padding 1 with stride 2: windows at rows/cols -1 and 1.
    Tensor z = conv2d(x, w, Tensor(), {.stride = 2, .padding = 1});
    EXPECT_EQ(z.to_vector<double>(), (std::vector<double>{1, 3, 7, 14}));
  }
}

TEST(Conv2d, SamePaddingPutsTheOddRowAtTheEnd) {
  Tensor x = ones({1, 1, 4, 4}, {DType::Float64});
  Tensor w = ones({1, 1, 2, 2}, {DType::Float64});
  Tensor y = conv2d(x, w, Tensor(), {.padding = "same"});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  // Total padding 1 per dim goes to the bottom/right: the last row and column see one zero row.
  std::vector<double> v = y.to_vector<double>();
  EXPECT_EQ(v[0], 4);
  EXPECT_EQ(v[3], 2);
  EXPECT_EQ(v[12], 2);
  EXPECT_EQ(v[15], 1);
  // TensorFlow's SAME with stride 2: ceil(5 / 2) = 3 outputs, total padding 2 -> (1, 1).
  Tensor x5 = ones({1, 1, 5, 5}, {DType::Float64});
  Tensor w3 = ones({1, 1, 3, 3}, {DType::Float64});
  Tensor s = conv2d(x5, w3, Tensor(), {.stride = 2, .padding = "same"});
  EXPECT_EQ(s.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{4, 6, 4, 6, 9, 6, 4, 6, 4}));
  Tensor v5 = conv2d(x5, w3, Tensor(), {.padding = "valid"});
  EXPECT_EQ(v5.shape(), (Shape{1, 1, 3, 3}));
  // Explicit asymmetric padding reproduces "same".
  Tensor a = conv2d(x, w, Tensor(), {.padding = Padding::asymmetric(0, 1, 0, 1)});
  EXPECT_EQ(a.to_vector<double>(), y.to_vector<double>());
}

// The float32 path (oneDNN) against the float64 reference loops, forward and both backward ops,
// over strides, paddings, dilations and groups.
TEST(Conv2d, OneDnnMatchesReferenceLoops) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {}},
      {{2, 3, 7, 6}, {4, 3, 3, 2}, {.stride = 2, .padding = 1}},
      {{1, 4, 9, 8},
       {6, 2, 3, 3},
       {.stride = {2, 1}, .padding = {2, 1}, .dilation = 2, .groups = 2}},
      {{2, 6, 5, 5}, {6, 1, 3, 3}, {.padding = "same", .groups = 6}},
      {{1, 2, 6, 7}, {3, 2, 2, 4}, {.stride = 3, .padding = "same"}},
      {{3, 2, 8, 8}, {2, 1, 1, 1}, {.stride = 3, .groups = 2}},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    Tensor x = sample_tensor(c.x, seed++), w = sample_tensor(c.w, seed++);
    Tensor b = sample_tensor({c.w[0]}, seed++);
    Tensor y = conv2d(x, w, b, c.o);
    expect_allclose(conv2d(f32(x), f32(w), f32(b), c.o), y, 1e-5);
    Tensor g = sample_tensor(y.shape(), seed++);
    Size2 size{c.x[2], c.x[3]};
    expect_allclose(conv2d_backward_input(f32(g), f32(w), size, c.o),
                    conv2d_backward_input(g, w, size, c.o), 1e-5);
    Size2 kernel{c.w[2], c.w[3]};
    expect_allclose(conv2d_backward_weight(f32(x), f32(g), kernel, c.o),
                    conv2d_backward_weight(x, g, kernel, c.o), 1e-5);
  }
}

// <g, conv2d(x, w)> = <backward_input(g, w), x> = <backward_weight(x, g), w> (Note [conv
// gradients]).
TEST(Conv2d, BackwardOpsAreAdjoints) {
  const Conv2dOptions o{.stride = {2, 1}, .padding = "same", .dilation = {1, 2}, .groups = 2};
  Tensor x = sample_tensor({2, 4, 7, 6}, 11), w = sample_tensor({6, 2, 3, 2}, 12);
  Tensor y = conv2d(x, w, Tensor(), o);
  Tensor g = sample_tensor(y.shape(), 13);
  const double lhs = sum(mul(g, y)).item();
  EXPECT_NEAR(sum(mul(conv2d_backward_input(g, w, {7, 6}, o), x)).item(), lhs, 1e-12);
  EXPECT_NEAR(sum(mul(conv2d_backward_weight(x, g, {3, 2}, o), w)).item(), lhs, 1e-12);
}

TEST(Conv2d, GradientsAndSecondOrder) {
  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{conv2d(in[0], in[1], in[2], {.stride = 2, .padding = "same"})};
  };
  std::vector<Tensor> in = {sample_tensor({1, 2, 5, 4}, 21), sample_tensor({3, 2, 2, 3}, 22),
                            sample_tensor({3}, 23)};
  EXPECT_TRUE(gradcheck(f, in));
  EXPECT_TRUE(gradgradcheck(f, in));
  auto t = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{conv_transpose2d(in[0], in[1], Tensor(), {.stride = 2})};
  };
  std::vector<Tensor> tin = {sample_tensor({1, 2, 3, 2}, 24), sample_tensor({2, 2, 2, 2}, 25)};
  EXPECT_TRUE(gradgradcheck(t, tin));
}

TEST(Conv2d, GradientOfBiasIsTheSumOverBatchAndSpace) {
  Tensor x = sample_tensor({2, 3, 5, 5}, 31), w = sample_tensor({4, 3, 3, 3}, 32);
  Tensor b = sample_tensor({4}, 33).set_requires_grad(true);
  Tensor g = sample_tensor({2, 4, 3, 3}, 34);
  Tensor y = conv2d(x, w, b);
  y.backward(g);
  expect_allclose(b.grad(), sum(g, {0, 2, 3}), 1e-12);
}

TEST(Conv2d, UnbatchedStridedAndLowPrecisionInputs) {
  Tensor x = sample_tensor({2, 3, 6, 5}, 41), w = sample_tensor({4, 3, 3, 3}, 42);
  Tensor y = conv2d(x, w, Tensor(), {.padding = 1});
  // Unbatched [C, H, W].
  Tensor u = conv2d(select(x, 0, 1), w, Tensor(), {.padding = 1});
  EXPECT_EQ(u.shape(), (Shape{4, 6, 5}));
  expect_allclose(u, select(y, 0, 1), 1e-14);
  // A channels-last view (non-contiguous) gives the same values, in both paths.
  Tensor nhwc = contiguous(permute(x, {0, 2, 3, 1}));
  Tensor view = permute(nhwc, {0, 3, 1, 2});
  ASSERT_FALSE(view.is_contiguous());
  expect_allclose(conv2d(view, w, Tensor(), {.padding = 1}), y, 1e-14);
  expect_allclose(conv2d(f32(view), f32(w), Tensor(), {.padding = 1}), y, 1e-5);
  // 16-bit floats compute in float32 and round once.
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    Tensor h = conv2d(to_dtype(x, dt), to_dtype(w, dt), Tensor(), {.padding = 1});
    EXPECT_EQ(h.dtype(), dt);
    expect_allclose(h, y, dt == DType::BFloat16 ? 5e-2 : 5e-3);
  }
}

TEST(Conv2d, EmptyBatchAndZeroChannels) {
  Tensor y = conv2d(empty({0, 3, 5, 5}), ones({2, 3, 3, 3}));
  EXPECT_EQ(y.shape(), (Shape{0, 2, 3, 3}));
  Tensor z = conv2d(empty({1, 0, 4, 4}), ones({2, 0, 3, 3}), tensor({1, 2}));
  EXPECT_EQ(z.to_vector<double>(), (std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2}));
}

TEST(Conv2d, ResultsDoNotDependOnThreadCount) {
  Tensor x = sample_tensor({4, 8, 12, 12}, 51), w = sample_tensor({8, 4, 3, 3}, 52);
  const Conv2dOptions o{.padding = 1, .groups = 2};
  const int before = get_num_threads();
  set_num_threads(1);
  Tensor y1 = conv2d(x, w, Tensor(), o);
  Tensor gi1 = conv2d_backward_input(y1, w, 12, o);
  Tensor gw1 = conv2d_backward_weight(x, y1, 3, o);
  Tensor f1 = conv2d(f32(x), f32(w), Tensor(), o);
  set_num_threads(std::max(2, before));
  Tensor y2 = conv2d(x, w, Tensor(), o);
  Tensor f2 = conv2d(f32(x), f32(w), Tensor(), o);
  EXPECT_EQ(y1.to_vector<double>(), y2.to_vector<double>());
  EXPECT_EQ(conv2d_backward_input(y2, w, 12, o).to_vector<double>(), gi1.to_vector<double>());
  EXPECT_EQ(conv2d_backward_weight(x, y2, 3, o).to_vector<double>(), gw1.to_vector<double>());
  EXPECT_EQ(f1.to_vector<double>(), f2.to_vector<double>());
  set_num_threads(before);
}

TEST(ConvTranspose2d, HandComputedValues) {
  // Stride 2 with a 2x2 kernel of ones: every input value fills its own 2x2 block.
  Tensor x = tensor({1, 2, 3, 4}).reshape({1, 1, 2, 2});
  Tensor y = conv_transpose2d(x, ones({1, 1, 2, 2}), tensor({10}), {.stride = 2});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(y.to_vector<double>(),
            (std::vector<double>{11, 11, 12, 12, 11, 11, 12, 12, 13, 13, 14, 14, 13, 13, 14, 14}));
  // Output size (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
  Tensor z = conv_transpose2d(ones({2, 4, 3, 5}), ones({4, 3, 3, 3}), Tensor(),
                              {.stride = {2, 3}, .padding = 1, .output_padding = {1, 2}});
  EXPECT_EQ(z.shape(), (Shape{2, 3, 6, 15}));
}

TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  const ConvTranspose2dOptions t{.stride = 2, .padding = 1, .output_padding = 1, .groups = 2};
  Tensor x = sample_tensor({2, 4, 3, 3}, 61), w = sample_tensor({4, 3, 3, 3}, 62);
  Tensor y = conv_transpose2d(x, w, Tensor(), t);
  ASSERT_EQ(y.shape(), (Shape{2, 6, 6, 6}));
  Tensor u = sample_tensor(y.shape(), 63);
  Tensor cu = conv2d(u, w, Tensor(), {.stride = 2, .padding = 1, .groups = 2});
  EXPECT_NEAR(sum(mul(u, y)).item(), sum(mul(cu, x)).item(), 1e-12);
}

TEST(Conv2d, ErrorsNameTheOpShapesAndCaller) {
  const std::string file = "test_conv.cpp";
  expect_error(
      [] {
        conv2d(empty({8, 3, 28, 28}), empty({32, 16, 3, 3}));
      },
      {"[conv2d] expected input with 16 channels (weight float32[32, 16, 3, 3], groups "
       "1), but got float32[8, 3, 28, 28]",
       file});
  expect_error(
      [] {
        conv2d(empty({28, 28}), empty({4, 1, 3, 3}));
      },
      {"[conv2d]", "expected input of rank 3 (C,H,W) or 4 (N,C,H,W)", "[28, 28]", file});
  expect_error(
      [] {
        conv2d(empty({1, 1, 2, 2}), empty({1, 1, 3, 3}));
      },
      {"[conv2d]", "kernel (3x3", "padded input (2x2", "float32[1, 1, 2, 2]", file});
  expect_error(
      [] {
        conv2d(empty({1, 4, 5, 5}), empty({6, 1, 3, 3}), Tensor(), {.groups = 4});
      },
      {"[conv2d]", "divisible by groups 4", "[6, 1, 3, 3]", file});
  expect_error(
      [] {
        conv2d(empty({1, 3, 5, 5}), empty({4, 3, 3, 3}, {DType::Float64}));
      },
      {"[conv2d]", "same dtype", "float64[4, 3, 3, 3]", file});
  expect_error(
      [] {
        conv2d(empty({1, 3, 5, 5}), empty({4, 3, 3, 3}), empty({3}));
      },
      {"[conv2d]", "bias of shape [4]", "float32[3]", file});
  expect_error(
      [] {
        conv2d(empty({1, 3, 5, 5}), empty({4, 3, 3, 3}), Tensor(), {.stride = 0});
      },
      {"[conv2d]", "positive stride", file});
  expect_error(
      [] {
        conv2d(empty({1, 3, 5, 5}), empty({4, 3, 3, 3}), Tensor(), {.padding = -1});
      },
      {"[conv2d]", "non-negative padding", file});
  expect_error(
      [] {
        conv2d(empty({1, 3, 5, 5}), empty({4, 3, 3, 3}), Tensor(), {.padding = "full"});
      },
      {"[conv2d]", "\"same\" or \"valid\"", "\"full\"", file});
  expect_error(
      [] {
        conv2d(empty({1, 3, 5, 5}, {DType::Int64}), empty({4, 3, 3, 3}));
      },
      {"[conv2d]", "floating-point input", "int64[1, 3, 5, 5]", file});
}

TEST(Conv2d, BackwardAndTransposeErrors) {
  const std::string file = "test_conv.cpp";
  expect_error(
      [] {
        conv2d_backward_input(empty({1, 4, 4, 4}), empty({4, 3, 3, 3}), 5);
      },
      {"[conv2d_backward_input]", "grad of spatial size 3x3", "float32[1, 4, 4, 4]", file});
  expect_error(
      [] {
        conv2d_backward_input(empty({1, 5, 3, 3}), empty({4, 3, 3, 3}), 5);
      },
      {"[conv2d_backward_input]", "grad with 4 channels", file});
  expect_error(
      [] {
        conv2d_backward_weight(empty({2, 3, 5, 5}), empty({1, 4, 3, 3}), 3);
      },
      {"[conv2d_backward_weight]", "same batch", file});
  expect_error(
      [] {
        conv_transpose2d(empty({1, 4, 3, 3}), empty({4, 3, 3, 3}), Tensor(),
                         {.stride = 2, .output_padding = 2});
      },
      {"[conv_transpose2d]", "output_padding smaller than the stride", file});
  expect_error(
      [] {
        conv_transpose2d(empty({1, 3, 3, 3}), empty({4, 3, 3, 3}));
      },
      {"[conv_transpose2d]", "input with 4 channels", "float32[1, 3, 3, 3]", file});
  expect_error(
      [] {
        conv_transpose2d(empty({1, 4, 1, 1}), empty({4, 3, 1, 1}), Tensor(), {.padding = 1});
      },
      {"[conv_transpose2d]", "positive output size", file});
}

TEST(Conv2d, MetaTensorsInferShapes) {
  Tensor y = conv2d(empty({8, 3, 28, 28}, {DType::Float32, kMeta}),
                    empty({16, 3, 5, 5}, {DType::Float32, kMeta}), Tensor(),
                    {.stride = 2, .padding = "same"});
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), (Shape{8, 16, 14, 14}));
}

}  // namespace
}  // namespace kiln
