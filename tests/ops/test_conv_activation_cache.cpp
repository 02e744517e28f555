// Note [blocked activations]: a no-grad convolution reading another's output (as its input or as
// the residual of conv2d_affine) takes that convolution's blocked copy instead of reordering the
// plain tensor again. It must give exactly what reading the plain tensor gives, and a changed
// tensor or another view of the same storage must never be served from a stale copy.
#include <gtest/gtest.h>

#include "kiln/core/grad_mode.h"
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

// A copy in fresh storage, so no cached copy can match it: the reference reading.
Tensor fresh(const Tensor& t) {
  Tensor out = empty(t.shape());
  out.copy_(t);
  return out;
}

// Batch 4 runs oneDNN's direct kernels, which compute in a blocked layout (nChw16c).
TEST(ConvActivationCache, ChainedConvolutionsReadTheSameValues) {
  manual_seed(31);
  Tensor x = randn({4, 16, 16, 16});
  Tensor w1 = mul(randn({16, 16, 3, 3}), 0.2), w2 = mul(randn({32, 16, 3, 3}), 0.2);
  NoGradGuard no_grad;
  Tensor y1 = conv2d(x, w1, Tensor(), kSame);
  Tensor want = conv2d(fresh(y1), w2, Tensor(), kSame);
  expect_allclose(conv2d(y1, w2, Tensor(), kSame), want, 0.0);
  // Twice: the copy stays valid while y1 is unchanged.
  expect_allclose(conv2d(y1, w2, Tensor(), kSame), want, 0.0);
}

TEST(ConvActivationCache, InPlaceChangesAreSeen) {
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
TEST(ConvActivationCache, AnotherViewOfTheStorageIsNotTheCachedTensor) {
  manual_seed(33);
  Tensor x = randn({4, 16, 16, 16}), w = mul(randn({16, 16, 3, 3}), 0.2);
  NoGradGuard no_grad;
  Tensor y = conv2d(x, w, Tensor(), kSame);
  Tensor view = permute(y, {0, 3, 1, 2});
  ASSERT_EQ(view.shape(), y.shape());
  ASSERT_TRUE(view.is_channels_last());
  expect_allclose(conv2d(view, w, Tensor(), kSame), conv2d(fresh(view), w, Tensor(), kSame), 0.0);
}

// ResNet's block: the block input is both the first convolution's input and the second's
// residual, and comes from a convolution itself.
TEST(ConvActivationCache, ResidualFromAnotherConvolution) {
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
  Tensor want = block(fresh(block_in));
  expect_allclose(block(block_in), want, 0.0);
  block_in.add_(1.0);
  expect_allclose(block(block_in), block(fresh(block_in)), 0.0);
}

}  // namespace
}  // namespace kiln
