// Note [blocked activations]: a no-grad batched convolution leaves its output in oneDNN's blocked
// layout until someone reads the memory; a convolution reading it (as its input or as the residual
// of conv2d_affine) takes the blocked form. Every reader must see exactly what an eagerly written
// output holds, and another view of the same storage must never be taken for the tensor.
#include <gtest/gtest.h>

#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_allclose;

const Conv2dOptions kSame{.padding = 1};

// A copy in fresh storage, which holds no blocked form: the reference reading.
Tensor fresh(const Tensor& t) {
  Tensor out = empty(t.shape(), {t.dtype()});
  out.copy_(t);
  return out;
}

// Batch 4 runs oneDNN's direct kernels, which compute in a blocked layout (nChw16c).
TEST(BlockedActivations, ChainedConvolutionsReadTheSameValues) {
  manual_seed(31);
  Tensor x = randn({4, 16, 16, 16});
  Tensor w1 = mul(randn({16, 16, 3, 3}), 0.2), w2 = mul(randn({32, 16, 3, 3}), 0.2);
  NoGradGuard no_grad;
  Tensor y1 = conv2d(x, w1, Tensor(), kSame);
  Tensor got = conv2d(y1, w2, Tensor(), kSame);  // takes y1's blocked form
  ASSERT_NE(y1.storage()->deferred(), nullptr);  // which it did not write out
  Tensor want = conv2d(fresh(y1), w2, Tensor(), kSame);
  expect_allclose(got, want, 0.0);
  // Again, now that fresh(y1) has written y1 out.
  expect_allclose(conv2d(y1, w2, Tensor(), kSame), want, 0.0);
}

TEST(BlockedActivations, InPlaceChangesAreSeen) {
  manual_seed(32);
  Tensor x = randn({4, 16, 16, 16}), w = mul(randn({16, 16, 3, 3}), 0.2);
  NoGradGuard no_grad;
  Tensor y = conv2d(x, w, Tensor(), kSame);
  y.mul_(-2.0);  // bumps the version
  expect_allclose(conv2d(y, w, Tensor(), kSame), conv2d(fresh(y), w, Tensor(), kSame), 0.0);
  y.copy_(randn({4, 16, 16, 16}));
  expect_allclose(conv2d(y, w, Tensor(), kSame), conv2d(fresh(y), w, Tensor(), kSame), 0.0);
}

// With C == H == W, permute(0, 3, 1, 2) of an NCHW tensor is a channels-last view of the same
// shape, storage and offset, but other values at each index.
TEST(BlockedActivations, AnotherViewOfTheStorageIsNotTakenForTheTensor) {
  manual_seed(33);
  Tensor x = randn({4, 16, 16, 16}), w = mul(randn({16, 16, 3, 3}), 0.2);
  NoGradGuard no_grad;
  Tensor y = conv2d(x, w, Tensor(), kSame);
  Tensor view = permute(y, {0, 3, 1, 2});
  ASSERT_EQ(view.shape(), y.shape());
  ASSERT_TRUE(view.is_channels_last());
  ASSERT_NE(y.storage()->deferred(), nullptr);
  Tensor got = conv2d(view, w, Tensor(), kSame);
  // Not y's blocked form: the view read the memory, which wrote y out.
  EXPECT_EQ(y.storage()->deferred(), nullptr);
  expect_allclose(got, conv2d(fresh(view), w, Tensor(), kSame), 0.0);
}

// ResNet's block: the block input is both the first convolution's input and the second's
// residual, and comes from a convolution itself.
TEST(BlockedActivations, ResidualFromAnotherConvolution) {
  manual_seed(34);
  Tensor x = randn({4, 16, 8, 8});
  Tensor w0 = mul(randn({16, 16, 3, 3}), 0.2), w1 = mul(randn({16, 16, 3, 3}), 0.2);
  Tensor w2 = mul(randn({16, 16, 3, 3}), 0.2);
  Tensor scale = add(rand({16}), 0.5), shift = randn({16});
  NoGradGuard no_grad;
  Tensor block_in = conv2d_affine(x, w0, scale, shift, Tensor(), true, kSame);
  auto block = [&](const Tensor& in) {
    Tensor h = conv2d_affine(in, w1, scale, shift, Tensor(), true, kSame);
    return conv2d_affine(h, w2, scale, shift, in, true, kSame);
  };
  Tensor got = block(block_in);  // block_in's blocked form, as input and as residual
  ASSERT_NE(block_in.storage()->deferred(), nullptr);
  expect_allclose(got, block(fresh(block_in)), 0.0);
  block_in.add_(1.0);
  expect_allclose(block(block_in), block(fresh(block_in)), 0.0);
}

// bfloat16 inference convolutions defer their blocked outputs too, where oneDNN has native
// bfloat16 kernels (Note [low-precision convolutions]): the same ResNet block in bfloat16, with
// float32 scale and shift (Note [low-precision conv epilogue]).
TEST(BlockedActivations, Bfloat16BlocksChainToo) {
  manual_seed(36);
  const DType bf = DType::BFloat16;
  Tensor x = randn({4, 16, 8, 8}).to(bf);
  Tensor w0 = mul(randn({16, 16, 3, 3}), 0.2).to(bf), w1 = mul(randn({16, 16, 3, 3}), 0.2).to(bf);
  Tensor w2 = mul(randn({16, 16, 3, 3}), 0.2).to(bf);
  Tensor scale = add(rand({16}), 0.5), shift = randn({16});
  NoGradGuard no_grad;
  Tensor block_in = conv2d_affine(x, w0, scale, shift, Tensor(), true, kSame);
  ASSERT_EQ(block_in.dtype(), bf);
  auto block = [&](const Tensor& in) {
    Tensor h = conv2d_affine(in, w1, scale, shift, Tensor(), true, kSame);
    return conv2d_affine(h, w2, scale, shift, in, true, kSame);
  };
  if (has_native_low_precision(bf)) {
    EXPECT_NE(block_in.storage()->deferred(), nullptr);
  }
  Tensor got = block(block_in);
  expect_allclose(got, block(fresh(block_in)), 0.0);
  block_in.add_(1.0);
  expect_allclose(block(block_in), block(fresh(block_in)), 0.0);
  // Plain convolutions chained, read back.
  Tensor y = conv2d(x, w1, Tensor(), kSame);
  expect_allclose(conv2d(y, w2, Tensor(), kSame), conv2d(fresh(y), w2, Tensor(), kSame), 0.0);
  expect_allclose(y.to(DType::Float32), fresh(y).to(DType::Float32), 0.0);
}

// The two backward passes share grad_output's blocked copy in bfloat16 as in float32: the weight
// gradient read through it equals the one from a fresh copy, also after grad_output changes.
TEST(BlockedActivations, Bfloat16BackwardPassesShareTheBlockedGradOutput) {
  manual_seed(37);
  const DType bf = DType::BFloat16;
  Tensor x = randn({4, 16, 8, 8}).to(bf), w = mul(randn({32, 16, 3, 3}), 0.2).to(bf);
  Tensor gy = randn({4, 32, 8, 8}).to(bf);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    Tensor gx = conv2d_backward_input(gy, w, {8, 8}, kSame);
    Tensor gw = conv2d_backward_weight(x, gy, {3, 3}, kSame);  // the cached blocked gy
    expect_allclose(gx, conv2d_backward_input(fresh(gy), w, {8, 8}, kSame), 0.0);
    expect_allclose(gw, conv2d_backward_weight(x, fresh(gy), {3, 3}, kSame), 0.0);
    NoGradGuard no_grad;
    gy.mul_(-0.5);  // a new version: the cache must not serve the old copy
  }
}

// The output, read directly, equals the output of the same convolution while recording a
// gradient, which writes its output eagerly. A 1x1 kernel runs the same primitive in both modes
// (3x3 would run Winograd without grad, Note [conv winograd]), so the bits are the same.
TEST(BlockedActivations, ReadingThePendingOutputGivesTheSameValues) {
  manual_seed(35);
  Tensor x = randn({4, 16, 8, 8}), w = mul(randn({32, 16, 1, 1}), 0.2);
  Tensor eager = conv2d(x, w);  // grad mode: written eagerly
  NoGradGuard no_grad;
  Tensor y = conv2d(x, w);
  ASSERT_NE(y.storage()->deferred(), nullptr);  // still blocked
  expect_allclose(y, eager, 0.0);
  EXPECT_EQ(y.storage()->deferred(), nullptr);  // written out by the read
  // Freed while still pending: nothing to write, nothing leaked (ASan).
  Tensor dropped = conv2d(x, w);
  dropped = Tensor();
}

TEST(BlockedActivations, InPlaceWritesAndSlicesSeeThePlainContents) {
  manual_seed(36);
  Tensor x = randn({4, 16, 8, 8}), w1 = mul(randn({16, 16, 1, 1}), 0.2);
  Tensor w = mul(randn({16, 16, 3, 3}), 0.2);
  Tensor eager = conv2d(x, w1);  // as above: the same primitive with and without grad
  NoGradGuard no_grad;
  Tensor y = conv2d(x, w1);
  y.add_(1.0);  // writes into the pending memory: written out first
  expect_allclose(y, add(eager, 1.0), 0.0);
  for (int64_t start : {0, 2}) {
    SCOPED_TRACE(start);
    Tensor z = conv2d(x, w1);
    Tensor part = slice(z, 0, start, start + 2);  // offset 0 (a prefix) and offset > 0
    expect_allclose(conv2d(part, w, Tensor(), kSame),
                    conv2d(fresh(slice(eager, 0, start, start + 2)), w, Tensor(), kSame), 0.0);
  }
}

// A pending output fed to a convolution that records a gradient: the forward may take the
// blocked form, the backward reads the saved input's memory.
TEST(BlockedActivations, GradientsThroughAPendingInput) {
  manual_seed(37);
  Tensor x = randn({4, 16, 8, 8}), w0 = mul(randn({16, 16, 3, 3}), 0.2);
  Tensor w = mul(randn({8, 16, 3, 3}), 0.2);
  w.set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = conv2d(x, w0, Tensor(), kSame);
  }
  Tensor reference = fresh(y);
  Tensor seed = randn({4, 8, 8, 8});
  Tensor got = grad({conv2d(y, w, Tensor(), kSame)}, {w}, {seed})[0];
  Tensor want = grad({conv2d(reference, w, Tensor(), kSame)}, {w}, {seed})[0];
  expect_allclose(got, want, 0.0);
}

}  // namespace
}  // namespace kiln
