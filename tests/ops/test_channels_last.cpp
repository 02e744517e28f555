// Note [channels-last]: which layouts ops produce for channels-last inputs, and that the layout
// never changes a value. The registry test runs every op sample with channels-last inputs too.
#include <gtest/gtest.h>

#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_allclose;
using test::expect_error;

constexpr MemoryFormat kLast = MemoryFormat::kChannelsLast;

// Same shape and dtype, and the same bits in every element.
void expect_identical(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
}

TEST(MemoryFormat, StridesAndDetection) {
  EXPECT_EQ(channels_last_strides({2, 3, 4, 5}), (Strides{60, 1, 15, 3}));
  Tensor t = empty({2, 3, 4, 5}, {DType::Float32, kCPU, false, kLast});
  EXPECT_TRUE(t.is_channels_last());
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (Strides{60, 1, 15, 3}));
  // A layout that is both counts as contiguous.
  Tensor both = empty({2, 3, 1, 1}, {DType::Float32, kCPU, false, kLast});
  EXPECT_TRUE(both.is_contiguous());
  EXPECT_FALSE(both.is_channels_last());
  // A permuted view of NHWC memory is channels-last; other permutations are not.
  Tensor nhwc = randn({2, 4, 5, 3});
  EXPECT_TRUE(permute(nhwc, {0, 3, 1, 2}).is_channels_last());
  EXPECT_FALSE(randn({2, 3, 4, 5}).transpose(2, 3).is_channels_last());
  EXPECT_FALSE(randn({3, 4, 5}).is_channels_last());
  // Size-1 dims may carry any stride.
  EXPECT_TRUE(is_channels_last({1, 3, 4, 5}, {999, 1, 15, 3}));
  expect_error(
      [] {
        empty({3, 4, 5}, {DType::Float32, kCPU, false, kLast});
      },
      {"[empty]", "rank 4", "[3, 4, 5]"});
}

TEST(MemoryFormat, ContiguousConvertsBothWaysAndIsDifferentiable) {
  manual_seed(1);
  Tensor x = randn({2, 3, 4, 5}, {DType::Float64});
  x.set_requires_grad(true);
  Tensor y = contiguous(x, kLast);
  EXPECT_TRUE(y.is_channels_last());
  expect_identical(y, x);
  EXPECT_TRUE(contiguous(y, kLast).is_same(y));
  Tensor back = contiguous(y);
  EXPECT_TRUE(back.is_contiguous());
  expect_identical(back, x);
  Tensor w = randn({2, 3, 4, 5}, {DType::Float64});
  std::vector<Tensor> g = grad({sum(mul(y, w))}, {x});
  expect_identical(g[0], w);
  expect_error(
      [] {
        contiguous(randn({3, 4, 5}), kLast);
      },
      {"[contiguous]", "rank 4", "[3, 4, 5]", "test_channels_last.cpp"});
}

TEST(ChannelsLast, ElementwiseOutputsFollowTheInputs) {
  manual_seed(2);
  Tensor a = randn({2, 6, 3, 5}), b = randn({2, 6, 3, 5});
  Tensor al = contiguous(a, kLast), bl = contiguous(b, kLast);
  Tensor r = relu(al);
  EXPECT_TRUE(r.is_channels_last());
  expect_identical(r, relu(a));
  Tensor s = add(al, bl);
  EXPECT_TRUE(s.is_channels_last());
  expect_identical(s, add(a, b));
  // A mixed pair falls back to contiguous; a broadcast operand does not vote.
  Tensor mixed = add(al, b);
  EXPECT_TRUE(mixed.is_contiguous());
  expect_identical(mixed, add(a, b));
  Tensor scale = randn({6, 1, 1});
  Tensor scaled = mul(al, scale);
  EXPECT_TRUE(scaled.is_channels_last());
  expect_identical(scaled, mul(a, scale));
  Tensor half = mul(al, 0.5);
  EXPECT_TRUE(half.is_channels_last());
  expect_identical(half, mul(a, 0.5));
  // In-place writes into a channels-last tensor keep its layout.
  Tensor dst = contiguous(a.clone(), kLast);
  dst.add_(bl);
  EXPECT_TRUE(dst.is_channels_last());
  expect_identical(dst, add(a, b));
}

TEST(ChannelsLast, ChannelAffineIsBitIdenticalToThePlainKernel) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (int64_t c : {3, 8, 19}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " channels " + std::to_string(c));
      manual_seed(3);
      Tensor x = randn({2, c, 5, 7}, {dt}), scale = randn({c}, {dt}), shift = randn({c}, {dt});
      Tensor got = channel_affine(contiguous(x, kLast), scale, shift);
      EXPECT_TRUE(got.is_channels_last());
      expect_identical(got, channel_affine(x, scale, shift));
    }
  }
}

// The float64 reference loops give the expected values of a float32 convolution.
Tensor reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  return conv2d(x.to(DType::Float64), w.to(DType::Float64), b.to(DType::Float64), o);
}

TEST(ChannelsLast, ConvolutionReadsAndWritesEitherLayout) {
  manual_seed(4);
  Conv2dOptions o;
  o.padding = Padding(1);
  Tensor w1 = randn({32, 16, 3, 3}), b1 = randn({32}), w2 = mul(randn({24, 32, 3, 3}), 0.1);
  for (int64_t n : {1, 2}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    Tensor x = randn({n, 16, 12, 12});
    NoGradGuard no_grad;
    Tensor y = conv2d(x, w1, b1, o);
    // Whether oneDNN picks NHWC depends on the CPU; the values never do.
    if (n > 1) {
      EXPECT_TRUE(y.is_contiguous());
    }
    expect_allclose(y, reference_conv(x, w1, b1, o), 1e-5);
    expect_allclose(conv2d(contiguous(x, kLast), w1, b1, o), y, 1e-6);
    // A channels-last output stays so through relu and feeds the next convolution as it is.
    Tensor h = relu(y);
    EXPECT_EQ(h.is_channels_last(), y.is_channels_last());
    Tensor z = conv2d(h, w2, Tensor(), o);
    expect_allclose(z, reference_conv(contiguous(h), w2, zeros({24}), o), 1e-5);
  }
}

TEST(ChannelsLast, ConvolutionGradientsAcceptChannelsLastOperands) {
  manual_seed(5);
  Conv2dOptions o;
  o.stride = {2, 2};
  o.padding = Padding(1);
  Tensor x = randn({2, 8, 9, 9}), w = randn({16, 8, 3, 3});
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor xl = contiguous(x.detach(), kLast);
  xl.set_requires_grad(true);
  Tensor seed = randn({2, 16, 5, 5});
  std::vector<Tensor> want = grad({conv2d(x, w, Tensor(), o)}, {x, w}, {seed});
  std::vector<Tensor> got = grad({conv2d(xl, w, Tensor(), o)}, {xl, w}, {contiguous(seed, kLast)});
  expect_allclose(got[0], want[0], 1e-5);
  expect_allclose(got[1], want[1], 1e-5);
  // The backward ops themselves, with channels-last grad_output and input.
  NoGradGuard no_grad;
  Tensor seed_last = contiguous(seed, kLast);
  expect_allclose(conv2d_backward_input(seed_last, w.detach(), {9, 9}, o),
                  conv2d_backward_input(seed, w.detach(), {9, 9}, o), 1e-6);
  expect_allclose(conv2d_backward_weight(xl.detach(), seed_last, {3, 3}, o),
                  conv2d_backward_weight(x.detach(), seed, {3, 3}, o), 1e-5);
}

TEST(ChannelsLast, HalfPrecisionConvolutionKeepsTheLayoutChoice) {
  manual_seed(6);
  Tensor x = randn({1, 8, 10, 10}, {DType::BFloat16}), w = randn({16, 8, 3, 3}, {DType::BFloat16});
  NoGradGuard no_grad;
  Tensor plain = conv2d(x, w);
  Tensor last = conv2d(contiguous(x, kLast), w);
  EXPECT_EQ(last.dtype(), DType::BFloat16);
  expect_identical(last, plain);
}

}  // namespace
}  // namespace kiln
