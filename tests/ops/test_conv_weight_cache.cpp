// Note [conv weight cache]: no-grad convolutions reuse the blocked copy of their weights; a
// changed or replaced weight must never be served from a stale copy.
#include <gtest/gtest.h>

#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"

namespace kiln {
namespace {

// recorded: with a gradient recorded (the weight requires grad), a "training" convolution.
Tensor conv(const Tensor& x, const Tensor& w, bool recorded) {
  Conv2dOptions o;
  o.padding = Padding(1);
  if (recorded) {
    Tensor leaf = w.detach();
    leaf.set_requires_grad(true);
    return conv2d(x, leaf, Tensor(), o).detach();
  }
  NoGradGuard no_grad;
  return conv2d(x, w, Tensor(), o);
}

// The recording path never uses the cache (Note [conv algorithm]), so it is the reference. A batch
// of one runs another oneDNN kernel without grad (Note [conv inference kind]), so the last bits may
// differ; a stale weight would be off by O(1).
void expect_same(const Tensor& x, const Tensor& w) {
  const std::vector<float> got = conv(x, w, false).to_vector<float>();
  const std::vector<float> want = conv(x, w, true).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
}

TEST(ConvWeightCache, InPlaceChangesAreSeen) {
  manual_seed(1);
  Tensor x = randn({2, 16, 8, 8}), w = randn({32, 16, 3, 3});
  expect_same(x, w);
  expect_same(x, w);  // a hit
  {
    NoGradGuard no_grad;
    w.mul_(0.5);  // in place: bumps the version
  }
  expect_same(x, w);
  w.copy_(randn({32, 16, 3, 3}));
  expect_same(x, w);
}

TEST(ConvWeightCache, ReplacedWeightsAreNeverConfused) {
  manual_seed(2);
  Tensor x = randn({1, 16, 8, 8});
  for (int i = 0; i < 20; ++i) {
    // Each weight is freed before the next is allocated, so the caching allocator hands out the
    // same address again: the cache must tell the storages apart.
    Tensor w = randn({32, 16, 3, 3});
    expect_same(x, w);
  }
}

TEST(ConvWeightCache, ViewsOfOneStorageAreDistinct) {
  manual_seed(3);
  Tensor x = randn({1, 16, 8, 8});
  Tensor both = randn({64, 16, 3, 3});
  expect_same(x, both.narrow(0, 0, 32));
  expect_same(x, both.narrow(0, 32, 32));
}

}  // namespace
}  // namespace kiln
