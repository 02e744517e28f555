// Minimal repros of what the differential fuzzer (tests/fuzz) found, each checked against what
// PyTorch 1.13 does with the same calls.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/ops/sample_data.h"

namespace kiln {
namespace {

Tensor leaf(std::initializer_list<double> v) {
  Tensor t = tensor(v);
  t.set_requires_grad(true);
  return t;
}

// torch.zeros(1).expand(3).add_(1) raises "more than one element of the written-to tensor refers
// to a single memory location"; fill_/zero_ and x.copy_(x) are allowed.
TEST(FuzzRegressions, InPlaceOnExpandedViewIsRefused) {
  Tensor x = zeros({1}).expand({3});
  EXPECT_THROW(x.add_(1.0), Error);
  EXPECT_THROW(x.mul_(2.0), Error);
  EXPECT_THROW(x.clamp_(0.0, 1.0), Error);
  EXPECT_THROW(x.copy_(ones({3})), Error);
  x.fill_(2.0);
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{2, 2, 2}));
  x.copy_(x);
  x.zero_();
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{0, 0, 0}));
  Tensor one = zeros({1}).expand({1});  // a size-1 broadcast dim shares nothing
  one.add_(1.0);
  EXPECT_EQ(one.item(), 1.0);
  Tensor empty = zeros({1, 0}).expand({2, 0});  // nor does an empty tensor
  EXPECT_NO_THROW(empty.sub_(1.0));
}

// x.copy_(x) bumps the version like any in-place op: a saved x is then stale (PyTorch: "modified
// by an inplace operation").
TEST(FuzzRegressions, SelfCopyBumpsTheVersion) {
  Tensor w = leaf({1.0, 2.0});
  Tensor a = mul(w, 2.0);
  Tensor y = mul(a, a);
  a.copy_(a);
  EXPECT_THROW(sum(y).backward(), Error);
}

// F.batch_norm(x, rm, rv) with rm.requires_grad raises in PyTorch in both modes.
TEST(FuzzRegressions, BatchNormRunningStatsMustNotRequireGrad) {
  Tensor x = sample_tensor({4, 3}, 1).to(DType::Float32);
  Tensor rm = zeros({3}), rv = ones({3});
  rm.set_requires_grad(true);
  EXPECT_THROW(batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5), Error);
  EXPECT_THROW(batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.1, 1e-5), Error);
  NoGradGuard no_grad;
  EXPECT_NO_THROW(batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.1, 1e-5));
}

// Ops keep only what their gradient reads, so changing the rest in place is no error.
TEST(FuzzRegressions, ScatterAddDoesNotKeepTheIndexForSelfOnly) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor index = tensor(std::vector<int64_t>{0, 2});
  Tensor y = scatter_add(mul(x, 1.0), 0, index, tensor({5.0, 6.0}));
  index.zero_();
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1, 1}));
}

TEST(FuzzRegressions, DropoutDoesNotKeepItsInput) {
  Tensor w = leaf({1.0, 2.0, 3.0});
  Tensor a = mul(w, 2.0);
  Tensor y = dropout(a, 1.0, true);
  a.clamp_(-0.5, 1.5);
  sum(y).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
}

TEST(FuzzRegressions, BmmKeepsOnlyTheOtherOperand) {
  Tensor w = leaf({1.0, 2.0});
  Tensor a = mul(reshape(w, {1, 1, 2}), 1.0);
  Tensor b = reshape(tensor({3.0, 4.0}), {1, 2, 1});
  Tensor y = bmm(a, b);
  a.fill_(0.0);  // a is read only for b's gradient, which no one needs
  sum(y).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{3, 4}));
}

TEST(FuzzRegressions, BatchNormDoesNotKeepItsBias) {
  Tensor x = sample_tensor({4, 3}, 2);
  x.set_requires_grad(true);
  Tensor bias = zeros({3}, {DType::Float64});
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), bias, true, 0.1, 1e-5);
  bias.fill_(1.0);
  EXPECT_NO_THROW(sum(y).backward());
}

// PyTorch: "expected weight to be at least 1 at dimension 0".
TEST(FuzzRegressions, ConvWithoutOutputChannelsIsRefused) {
  Tensor x = zeros({1, 3, 5, 5});
  EXPECT_THROW(conv2d(x, zeros({0, 3, 3, 3})), Error);
  EXPECT_THROW(conv_transpose2d(x, zeros({3, 0, 3, 3})), Error);
  // "Only zero batch or zero channel inputs are supported" (padding would make H' >= 1).
  EXPECT_THROW(conv2d(zeros({2, 3, 6, 0}), zeros({4, 3, 3, 3}), Tensor(), {.padding = 1}), Error);
  EXPECT_NO_THROW(conv2d(zeros({0, 3, 6, 6}), zeros({4, 3, 3, 3})));
}

// Non-finite values where a where() does not take a branch, or a gradient that is not finite,
// must not turn an exact gradient into nan (PyTorch's kernels give the values checked here).
TEST(FuzzRegressions, SmoothL1AndHuberWithAnInfiniteDifference) {
  for (bool huber : {false, true}) {
    Tensor x = tensor({INFINITY, 0.5});
    Tensor t = leaf({0.0, 0.0});
    Tensor l = huber ? huber_loss(x, t, Reduction::Sum, 1.0) : smooth_l1_loss(x, t, Reduction::Sum);
    l.backward();
    EXPECT_EQ(t.grad().to_vector<double>(), (std::vector<double>{-1.0, -0.5})) << huber;
  }
}

TEST(FuzzRegressions, BinaryCrossEntropyTargetGradWithAnInfiniteIncomingGradient) {
  Tensor p = tensor({0.25, 0.75});
  Tensor t = leaf({0.5, 0.5});
  Tensor l = binary_cross_entropy(p, t, Tensor(), Reduction::None);
  l.backward(tensor({INFINITY, INFINITY}));
  // d/dt = log(1 - p) - log(p): negative at p = 0.25, positive at 0.75.
  EXPECT_EQ(t.grad().to_vector<double>(), (std::vector<double>{INFINITY, -INFINITY}));
}

// Every target ignored: the mean is 0 / 0 = nan, and the gradient is exactly 0 even when what
// flows back is nan (sigmoid of the loss).
TEST(FuzzRegressions, AllIgnoredTargetsGiveZeroGradientsEvenFromNan) {
  Tensor x = sample_tensor({3, 4}, 5);
  x.set_requires_grad(true);
  Tensor target = tensor(std::vector<int64_t>{1, 1, 1});
  for (bool fused : {true, false}) {
    x.set_grad(Tensor());
    Tensor l = fused ? cross_entropy(x, target, Tensor(), 1, Reduction::Mean, 0.3)
                     : nll_loss(log_softmax(x, 1), target, Tensor(), 1, Reduction::Mean);
    EXPECT_TRUE(std::isnan(l.item()));
    sigmoid(l).backward();
    for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 0.0) << fused;
  }
}

// Found under UBSan: the gradient of chunk of an empty tensor zeroed a null data pointer.
TEST(FuzzRegressions, GradientsOfEmptyTensors) {
  Tensor x = zeros({5, 0});
  x.set_requires_grad(true);
  std::vector<Tensor> parts = chunk(x, 2, 0);
  sum(parts[0]).backward();
  EXPECT_EQ(x.grad().shape(), (Shape{5, 0}));
  Tensor w = zeros({4, 0});
  w.set_requires_grad(true);
  sum(embedding(w, tensor(std::vector<int64_t>{1, 2}))).backward();
  EXPECT_EQ(w.grad().shape(), (Shape{4, 0}));
  EXPECT_EQ(one_hot(tensor(std::vector<int64_t>{}), 3).shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace kiln
