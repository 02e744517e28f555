// Note [channels-last]: which layouts ops produce for channels-last inputs, and that the layout
// never changes a value. The registry test runs every op sample with channels-last inputs too.
#include <gtest/gtest.h>

#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/op_factory.h"
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

// Note [channels-last training]: a recorded convolution on a channels-last float32 input runs the
// NHWC kernel and writes channels-last; batch norm, relu and add keep the layout, and so do the
// gradients flowing back, all with the values of the NCHW chain.
TEST(ChannelsLast, TrainingChainKeepsTheLayoutForwardAndBackward) {
  manual_seed(7);
  Conv2dOptions o;
  o.padding = Padding(1);
  Tensor w1 = mul(randn({16, 8, 3, 3}), 0.2), w2 = mul(randn({16, 16, 3, 3}), 0.1);
  Tensor g = add(randn({16}), 1.0), b = randn({16});
  for (Tensor* p : {&w1, &w2, &g, &b}) p->set_requires_grad(true);
  Tensor x = randn({4, 8, 10, 10});
  const auto chain = [&](const Tensor& in, bool check) {
    Tensor y1 = conv2d(in, w1, Tensor(), o);
    Tensor h = relu(batch_norm(y1, Tensor(), Tensor(), g, b, true));
    Tensor y2 = add(conv2d(h, w2, Tensor(), o), h);
    if (check) {
      EXPECT_TRUE(y1.is_channels_last());
      EXPECT_TRUE(h.is_channels_last());
      EXPECT_TRUE(y2.is_channels_last());
    }
    return y2;
  };
  Tensor seed = randn({4, 16, 10, 10});
  Tensor want = chain(x, false);
  std::vector<Tensor> want_g = grad({want}, {w1, w2, g, b}, {seed});
  Tensor xl = contiguous(x, kLast);
  xl.set_requires_grad(true);
  Tensor got = chain(xl, true);
  expect_allclose(got, want, 1e-5);
  // A seed in the other layout (what a pooling's gradient gives) is laid out like x once.
  for (const Tensor& s : {contiguous(seed, kLast), seed}) {
    std::vector<Tensor> got_g = grad({chain(xl, false)}, {w1, w2, g, b, xl}, {s});
    EXPECT_TRUE(got_g[4].is_channels_last());
    for (size_t i = 0; i < 4; ++i) expect_allclose(got_g[i], want_g[i], 1e-4);
  }
}

// batch_norm's three outputs: y, the batch mean and the biased variance.
std::vector<Tensor> batch_norm_stats(const Tensor& x, const Tensor& w, const Tensor& b) {
  return dispatch(make_op("batch_norm", {{"eps", 1e-5}, {"has_weight", true}, {"has_bias", true}}),
                  {x, w, b}, Loc::current());
}

TEST(ChannelsLast, BatchNormMatchesTheNchwKernelAndIgnoresThreads) {
  for (int64_t c : {1, 3, 8, 19, 64}) {
    SCOPED_TRACE("channels " + std::to_string(c));
    manual_seed(8);
    // More rows than one block of the kernel (Note [channels-last batch norm]).
    Tensor x = add(mul(randn({3, c, 13, 11}), 3.0), 2.0), w = randn({c}), b = randn({c});
    Tensor xl = contiguous(x, kLast);
    std::vector<Tensor> want = batch_norm_stats(x, w, b);
    std::vector<Tensor> got = batch_norm_stats(xl, w, b);
    EXPECT_EQ(got[0].is_channels_last(), c > 1);
    expect_allclose(got[0], want[0], 1e-6);
    expect_allclose(got[1], want[1], 1e-6);
    expect_allclose(got[2], want[2], 1e-6);
    // The gradient, with and without a weight and with gradients reaching the statistics.
    Tensor gy = randn({3, c, 13, 11}), gm = randn({c}), gv = randn({c});
    for (bool with_weight : {true, false}) {
      for (bool stat_grads : {false, true}) {
        const Tensor wt = with_weight ? w : Tensor();
        const Tensor sgm = stat_grads ? gm : Tensor(), sgv = stat_grads ? gv : Tensor();
        std::vector<Tensor> gw = batch_norm_backward(gy, x, want[1], want[2], wt, 1e-5, sgm, sgv);
        std::vector<Tensor> gl =
            batch_norm_backward(contiguous(gy, kLast), xl, want[1], want[2], wt, 1e-5, sgm, sgv);
        EXPECT_EQ(gl[0].is_channels_last(), c > 1);
        for (size_t i = 0; i < 3; ++i) expect_allclose(gl[i], gw[i], 1e-5);
      }
    }
    // Thread count never changes a bit.
    const int threads = get_num_threads();
    set_num_threads(1);
    std::vector<Tensor> one = batch_norm_stats(xl, w, b);
    std::vector<Tensor> g1 = batch_norm_backward(gy, xl, one[1], one[2], w);
    set_num_threads(std::max(2, threads));
    std::vector<Tensor> two = batch_norm_stats(xl, w, b);
    std::vector<Tensor> g2 = batch_norm_backward(gy, xl, two[1], two[2], w);
    set_num_threads(threads);
    for (size_t i = 0; i < 3; ++i) {
      expect_identical(one[i], two[i]);
      expect_identical(g1[i], g2[i]);
    }
  }
}

}  // namespace
}  // namespace kiln
