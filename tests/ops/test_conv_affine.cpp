// conv2d_affine (Note [conv epilogue]): the fused kernel against its composition, the gradient
// path, and bad inputs. PyTorch parity runs from the op's registry samples.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"

#include "kiln/ops/autocast.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/profiler.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_allclose;
using test::expect_error;

Tensor composed(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor& shift,
                const Tensor& residual, bool relu_after, const Conv2dOptions& o) {
  Tensor y = channel_affine(conv2d(x, w, Tensor(), o), scale, shift);
  if (residual.defined()) y = add(y, residual);
  return relu_after ? relu(y) : y;
}

struct Config {
  const char* label;
  Shape x, w;
  Conv2dOptions options;
  bool residual, relu, channels_last_input;
};

TEST(Conv2dAffine, FusedFloat32MatchesTheComposition) {
  const std::vector<Config> configs{
      {"b1 3x3 residual relu", {1, 16, 8, 8}, {16, 16, 3, 3}, {.padding = 1}, true, true, false},
      {"b1 channels-last input", {1, 16, 8, 8}, {32, 16, 3, 3}, {.padding = 1}, true, true, true},
      {"b1 stride 2 affine only",
       {1, 8, 9, 9},
       {16, 8, 3, 3},
       {.stride = 2, .padding = 1},
       false,
       false,
       false},
      {"b4 blocked layouts residual",
       {4, 16, 8, 8},
       {16, 16, 3, 3},
       {.padding = 1},
       true,
       true,
       false},
      {"b3 1x1 relu", {3, 8, 5, 5}, {24, 8, 1, 1}, {}, false, true, false},
      {"b2 groups", {2, 8, 6, 6}, {8, 4, 3, 3}, {.padding = 1, .groups = 2}, true, false, false},
  };
  for (const Config& c : configs) {
    SCOPED_TRACE(c.label);
    manual_seed(21);
    Tensor x = randn(c.x), w = mul(randn(c.w), 0.2);
    if (c.channels_last_input) x = contiguous(x, MemoryFormat::kChannelsLast);
    Tensor scale = add(rand({c.w[0]}), 0.5), shift = randn({c.w[0]});
    NoGradGuard no_grad;
    Tensor plain = conv2d(x, w, Tensor(), c.options);
    Tensor residual = c.residual ? randn(plain.shape()) : Tensor();
    Tensor got = conv2d_affine(x, w, scale, shift, residual, c.relu, c.options);
    Tensor want = composed(x, w, scale, shift, residual, c.relu, c.options);
    expect_allclose(got, want, 1e-5);
    // The fused output takes the layout the plain convolution would.
    EXPECT_EQ(got.is_channels_last(), plain.is_channels_last());
    // A residual in the other layout is read as well as one in the output's.
    if (c.residual) {
      Tensor last = contiguous(residual, MemoryFormat::kChannelsLast);
      expect_allclose(conv2d_affine(x, w, scale, shift, last, c.relu, c.options), want, 1e-5);
    }
  }
}

// Float32 without a gradient runs the one fused op at every batch size (the single-image brgemm
// kernels and the batched direct ones), not the composition.
TEST(Conv2dAffine, Float32RunsFusedAtEveryBatchSize) {
  for (int64_t n : {1, 8}) {
    SCOPED_TRACE(n);
    manual_seed(24);
    Tensor x = randn({n, 16, 8, 8}), w = mul(randn({16, 16, 3, 3}), 0.2);
    Tensor scale = add(rand({16}), 0.5), shift = randn({16}), residual = randn({n, 16, 8, 8});
    NoGradGuard no_grad;
    Profiler profiler;
    conv2d_affine(x, w, scale, shift, residual, true, {.padding = 1});
    profiler.stop();
    std::vector<std::string> names;
    for (const OpProfile& p : profiler.key_averages()) names.push_back(p.name);
    EXPECT_NE(std::find(names.begin(), names.end(), "conv2d_affine"), names.end());
    for (const char* composed_op : {"conv2d", "channel_affine", "relu"})
      EXPECT_EQ(std::find(names.begin(), names.end(), composed_op), names.end()) << composed_op;
  }
}

// The folded weight (w * scale) is cached between calls: a different scale, or the same weight
// changed in place, must not reuse it, and a gradient-mode call (no cache) agrees.
TEST(Conv2dAffine, FoldedWeightsFollowScaleAndWeightChanges) {
  for (int64_t n : {1, 4}) {
    SCOPED_TRACE(n);
    manual_seed(25);
    Tensor x = randn({n, 8, 6, 6}), w = mul(randn({16, 8, 3, 3}), 0.2);
    Tensor shift = randn({16});
    const Conv2dOptions o{.padding = 1};
    auto check = [&](const Tensor& scale) {
      Tensor want = composed(x, w, scale, shift, Tensor(), false, o);
      {
        NoGradGuard no_grad;
        expect_allclose(conv2d_affine(x, w, scale, shift, Tensor(), false, o), want, 1e-5);
      }
      // Gradient mode on, nothing requiring grad: fused, folded afresh without the cache.
      expect_allclose(conv2d_affine(x, w, scale, shift, Tensor(), false, o), want, 1e-5);
    };
    Tensor scale = add(rand({16}), 0.5);
    check(scale);
    check(mul(scale, 2.0));  // same weight, new scale values
    {
      NoGradGuard no_grad;
      w.mul_(-1.5);  // same storage, new version
    }
    check(scale);
  }
}

TEST(Conv2dAffine, Float64RunsTheComposition) {
  const DType dt = DType::Float64;
  manual_seed(22);
  Tensor x = randn({2, 4, 6, 6}, {dt}), w = randn({6, 4, 3, 3}, {dt});
  Tensor scale = randn({6}, {dt}), shift = randn({6}, {dt}), residual = randn({2, 6, 6, 6}, {dt});
  NoGradGuard no_grad;
  const Conv2dOptions o{.padding = 1};
  Tensor got = conv2d_affine(x, w, scale, shift, residual, true, o);
  EXPECT_EQ(got.dtype(), dt);
  expect_allclose(got, composed(x, w, scale, shift, residual, true, o), 0.0);
}

// Note [low-precision conv epilogue]: 16-bit input, weight and residual with float32 scale and
// shift; the output has the input's dtype. The composition (what a gradient-recording call runs)
// is the 16-bit convolution, the epilogue in float32 and one rounding; the fused kernel (bfloat16
// where oneDNN has native kernels) folds the scale into the weights, so it agrees within the
// 16-bit tolerance.
TEST(Conv2dAffine, SixteenBitInputsKeepTheEpilogueInFloat32) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (int64_t n : {1, 4}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " batch " + std::to_string(n));
      manual_seed(26);
      Tensor x = randn({n, 16, 8, 8}).to(dt), w = mul(randn({32, 16, 3, 3}), 0.1).to(dt);
      Tensor scale = add(rand({32}), 0.5), shift = randn({32});
      Tensor residual = randn({n, 32, 8, 8}).to(dt);
      const Conv2dOptions o{.padding = 1};
      const Tensor f32 = x.to(DType::Float32);
      // A gradient being recorded runs the composition: equal to the definition, spelled out
      // here (with the same convolution policy), bit for bit.
      Tensor wg = w.detach();
      wg.set_requires_grad(true);
      Tensor y = to_dtype(conv2d(x, wg, Tensor(), o), DType::Float32);
      y = relu(add(channel_affine(y, scale, shift), residual.to(DType::Float32)));
      const Tensor spelled = y.to(dt).detach();
      Tensor recorded = conv2d_affine(x, wg, scale, shift, residual, true, o);
      ASSERT_EQ(recorded.dtype(), dt);
      test::expect_bit_identical(recorded.detach(), spelled);
      // Without: the fused kernel (or the composition, where it does not fuse).
      NoGradGuard no_grad;
      Profiler profiler;
      Tensor got = conv2d_affine(x, w, scale, shift, residual, true, o);
      profiler.stop();
      ASSERT_EQ(got.dtype(), dt);
      Tensor want =
          composed(f32, w.to(DType::Float32), scale, shift, residual.to(DType::Float32), true, o);
      expect_allclose(got, want, 3e-2);
      std::set<std::string> names;
      for (const OpProfile& p : profiler.key_averages()) names.insert(p.name);
      const bool fused = dt == DType::BFloat16 && has_native_low_precision(dt);
      EXPECT_EQ(names.count("conv2d_affine"), fused ? 1u : 0u);
      EXPECT_EQ(names.count("channel_affine"), fused ? 0u : 1u);
      // The folded 16-bit weight is cached (Note [conv weight cache]): a weight changed in place
      // must not be served from it.
      expect_allclose(conv2d_affine(x, w, scale, shift, residual, true, o), got, 0.0);
      w.mul_(-1.0);
      Tensor flipped = conv2d_affine(x, w, scale, shift, residual, true, o);
      expect_allclose(
          flipped,
          composed(f32, w.to(DType::Float32), scale, shift, residual.to(DType::Float32), true, o),
          3e-2);
    }
  }
}

// Under autocast, the scale and shift stay float32 (OpSchema::float32_inputs) while the input,
// the weight and the residual are cast; the result is bfloat16.
TEST(Conv2dAffine, AutocastKeepsTheScaleAndShiftFloat32) {
  manual_seed(27);
  Tensor x = randn({2, 8, 6, 6}), w = mul(randn({16, 8, 3, 3}), 0.1);
  Tensor scale = add(rand({16}), 0.5), shift = randn({16}), residual = randn({2, 16, 6, 6});
  const Conv2dOptions o{.padding = 1};
  NoGradGuard no_grad;
  Tensor want = conv2d_affine(x.to(DType::BFloat16), w.to(DType::BFloat16), scale, shift,
                              residual.to(DType::BFloat16), true, o);
  AutocastGuard region(DType::BFloat16, {.force = true});
  Tensor got = conv2d_affine(x, w, scale, shift, residual, true, o);
  EXPECT_EQ(got.dtype(), DType::BFloat16);
  test::expect_bit_identical(got, want);
}

TEST(Conv2dAffine, GradientsFlowThroughTheComposition) {
  manual_seed(23);
  Tensor x = randn({2, 3, 5, 5}, {DType::Float64}), w = randn({4, 3, 3, 3}, {DType::Float64});
  Tensor scale = randn({4}, {DType::Float64}), shift = randn({4}, {DType::Float64});
  Tensor residual = randn({2, 4, 5, 5}, {DType::Float64});
  for (Tensor* t : {&x, &w, &scale, &shift, &residual}) t->set_requires_grad(true);
  const Conv2dOptions o{.padding = 1};
  Tensor y = conv2d_affine(x, w, scale, shift, residual, true, o);
  ASSERT_TRUE(y.requires_grad());
  Tensor seed = randn({2, 4, 5, 5}, {DType::Float64});
  std::vector<Tensor> inputs{x, w, scale, shift, residual};
  std::vector<Tensor> got = grad({y}, inputs, {seed});
  std::vector<Tensor> want =
      grad({composed(x, w, scale, shift, residual, true, o)}, inputs, {seed});
  for (size_t i = 0; i < got.size(); ++i) expect_allclose(got[i], want[i], 0.0);
}

TEST(Conv2dAffine, Errors) {
  Tensor x = ones({1, 3, 5, 5}), w = ones({4, 3, 3, 3}), s = ones({4});
  expect_error(
      [&] {
        conv2d_affine(ones({3, 5, 5}), w, s, s);
      },
      {"[conv2d_affine]", "rank 4", "[3, 5, 5]", "test_conv_affine.cpp"});
  expect_error([&] { conv2d_affine(x, w, ones({3}), s); },
               {"[conv2d_affine]", "scale", "[4]", "float32[3]"});
  expect_error([&] { conv2d_affine(x, w, s, ones({4}, {DType::Float64})); },
               {"[conv2d_affine]", "shift", "float64[4]"});
  expect_error(
      [&] {
        conv2d_affine(x, w, s, s, ones({1, 4, 5, 5}));
      },
      {"[conv2d_affine]", "residual", "[1, 4, 3, 3]", "[1, 4, 5, 5]"});
  expect_error(
      [&] {
        conv2d_affine(ones({1, 2, 5, 5}), w, s, s);
      },
      {"[conv2d_affine]", "3 channels", "float32[1, 2, 5, 5]"});
  // A 16-bit convolution's scale and shift are float32 (Note [low-precision conv epilogue]).
  Tensor xb = ones({1, 3, 5, 5}).to(DType::BFloat16), wb = w.to(DType::BFloat16);
  expect_error([&] { conv2d_affine(xb, wb, s.to(DType::BFloat16), s); },
               {"[conv2d_affine]", "scale", "dtype float32", "bfloat16[4]"});
  expect_error(
      [&] {
        conv2d_affine(xb, wb, s, s, ones({1, 4, 3, 3}));
      },
      {"[conv2d_affine]", "residual", "dtype bfloat16", "float32[1, 4, 3, 3]"});
  // The same checks when a gradient is being recorded (the composition runs then).
  Tensor wg = ones({4, 3, 3, 3});
  wg.set_requires_grad(true);
  expect_error(
      [&] {
        conv2d_affine(x, wg, s, s, ones({1, 4, 5, 5}));
      },
      {"[conv2d_affine]", "residual"});
}

}  // namespace
}  // namespace kiln
