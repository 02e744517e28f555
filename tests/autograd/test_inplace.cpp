// In-place ops and version counters (Note [in-place ops] in kiln/ops/tensor_methods.cpp).
#include <gtest/gtest.h>

#include "tests/support/test_util.h"

#include <cmath>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/node.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;
using test::expect_values;
using test::leaf;

std::string here(int line) {
  return "test_inplace.cpp:" + std::to_string(line);
}

TEST(Inplace, ModifyingASavedOutputNamesBothOpsAndLines) {
  Tensor x = leaf({1.0, 2.0});
  int exp_line = __LINE__ + 1;
  Tensor y = exp(x);
  int mul_line = __LINE__ + 1;
  y.mul_(2.0);
  std::string what = error_of([&] { y.sum().backward(); });
  expect_contains(what, {"[backward]", "'exp'", "'mul_'", here(exp_line), here(mul_line),
                         "modified in place", "version 0", "version 1", "float64[2] on cpu"});
  // Saving the call-site order: exp's site comes first in the text, then mul_'s.
  EXPECT_LT(what.find(here(exp_line)), what.find(here(mul_line)));
}

TEST(Inplace, ModifyingASavedInputIsAnError) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 1.0);
  int mul_line = __LINE__ + 1;
  Tensor z = mul(y, y);  // saves y
  int add_line = __LINE__ + 1;
  y.add_(1.0);
  std::string what = error_of([&] { sum(z).backward(); });
  expect_contains(what, {"'mul'", "'add_'", here(mul_line), here(add_line)});
}

TEST(Inplace, VersionCounterCountsEveryInPlaceOp) {
  Tensor t = tensor({1.0, 2.0, 3.0, 4.0}, {DType::Float64});
  EXPECT_EQ(t.version(), 0u);
  t.add_(1.0);
  t.mul_(tensor({2.0}, {DType::Float64}));
  t.sub_(1.0);
  t.div_(2.0);
  EXPECT_EQ(t.version(), 4u);
  expect_values(t, {1.5, 2.5, 3.5, 4.5});
  // Views share the counter with their base (they share the storage).
  Tensor v = t.narrow(0, 1, 2);
  v.zero_();
  EXPECT_EQ(t.version(), 5u);
  EXPECT_EQ(v.version(), 5u);
  expect_values(t, {1.5, 0.0, 0.0, 4.5});
  t.fill_(7.0);
  t.clamp_(std::nullopt, 3.0);
  t.copy_(tensor({1.0, 2.0, 3.0, 4.0}));
  EXPECT_EQ(t.version(), 8u);
  expect_values(t, {1.0, 2.0, 3.0, 4.0});
  // Out-of-place ops leave it alone.
  Tensor u = add(t, 1.0);
  EXPECT_EQ(t.version(), 8u);
  EXPECT_EQ(u.version(), 0u);
}

TEST(Inplace, OnALeafThatRequiresGradIsAnError) {
  Tensor x = leaf({1.0, 2.0});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { x.mul_(2.0); });
  expect_contains(
      what, {"[mul_]", "leaf", "float64[2] on cpu", "requires grad", "NoGradGuard", here(line)});
  line = __LINE__ + 1;
  what = error_of([&] { x.zero_(); });
  expect_contains(what, {"[fill_]", "leaf", here(line)});
  line = __LINE__ + 1;
  what = error_of([&] { x.copy_(tensor({3.0, 4.0})); });
  expect_contains(what, {"[copy_]", "leaf", here(line)});
  EXPECT_EQ(x.version(), 0u);
  expect_values(x, {1.0, 2.0});
}

TEST(Inplace, OnALeafUnderNoGradIsAllowedAndBumpsTheVersion) {
  Tensor x = leaf({1.0, 2.0});
  {
    NoGradGuard no_grad;
    x.mul_(3.0);
    x.sub_(tensor({1.0, 1.0}, {DType::Float64}));
  }
  EXPECT_EQ(x.version(), 2u);
  expect_values(x, {2.0, 5.0});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.grad_fn() == nullptr);
  // An optimizer-style step after backward: the graph of the step is not recorded.
  sum(mul(x, x)).backward();
  {
    NoGradGuard no_grad;
    x.sub_(mul(x.grad(), 0.25));
  }
  expect_values(x, {1.0, 2.5});
  EXPECT_TRUE(x.is_leaf());
}

TEST(Inplace, GradientsThroughInPlaceOps) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = leaf({3.0, -1.0});
  Tensor z = mul(x, 1.0);
  z.add_(y);
  z.mul_(2.0);
  EXPECT_EQ(z.grad_fn()->name(), "mul");
  EXPECT_EQ(z.version(), 2u);
  expect_values(z, {8.0, 2.0});
  sum(mul(z, z)).backward();  // L = sum(4 (x + y)^2): dL/dx = dL/dy = 8 (x + y)
  expect_values(x.grad(), {32.0, 8.0});
  expect_values(y.grad(), {32.0, 8.0});
}

TEST(Inplace, GradientsOfMulDivClampAndCopyInPlace) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor w = leaf({2.0, 4.0, -1.0});
  Tensor z = mul(x, 1.0);
  z.mul_(w);  // x w       (self is saved: the op uses a copy of it)
  z.div_(w);  // x w / w = x, gradient wrt w is 0
  sum(mul(z, z)).backward();
  expect_values(x.grad(), {2.0, 4.0, 6.0});
  expect_values(w.grad(), {0.0, 0.0, 0.0}, 1e-12);

  Tensor a = leaf({-2.0, 0.5, 2.0});
  Tensor c = mul(a, 1.0);
  c.clamp_(-1.0, 1.0);
  sum(mul(c, 3.0)).backward();
  expect_values(a.grad(), {0.0, 3.0, 0.0});

  // copy_ into a tensor that does not require grad makes it part of the graph.
  Tensor b = leaf({1.0, 2.0});
  Tensor dst = zeros({2}, {DType::Float64});
  dst.copy_(mul(b, 5.0));
  EXPECT_TRUE(dst.requires_grad());
  EXPECT_FALSE(dst.is_leaf());
  sum(dst).backward();
  expect_values(b.grad(), {5.0, 5.0});
  // add_ of a tensor that requires grad into one that does not.
  Tensor acc = zeros({2}, {DType::Float64});
  Tensor q = leaf({1.0, 1.0});
  acc.add_(mul(q, 4.0));
  sum(acc).backward();
  expect_values(q.grad(), {4.0, 4.0});
}

TEST(Inplace, OnAViewThatRequiresGradIsAnError) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor z = mul(x, 1.0);
  Tensor v = z.narrow(0, 0, 2);
  ASSERT_TRUE(v.is_view());
  int line = __LINE__ + 1;
  std::string what = error_of([&] { v.mul_(2.0); });
  expect_contains(what, {"[mul_]", "in-place modification of a view", "float64[2] on cpu",
                         "not supported", "out-of-place", here(line)});
  EXPECT_EQ(z.version(), 0u);
  expect_values(z, {1.0, 2.0, 3.0});
  // Under NoGradGuard the same view may be modified.
  {
    NoGradGuard no_grad;
    v.mul_(2.0);
  }
  expect_values(z, {2.0, 4.0, 3.0});
}

TEST(Inplace, UsingAViewAfterItsBaseWasRewrittenIsAnError) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor y = mul(x, 1.0);
  Tensor v = y.narrow(0, 1, 2);
  int modify_line = __LINE__ + 1;
  y.mul_(2.0);
  int use_line = __LINE__ + 1;
  std::string what = error_of([&] { sum(v); });
  expect_contains(what, {"[sum]", "is a view whose base was modified in place by 'mul_'",
                         here(modify_line), here(use_line)});
  // A view made after the in-place op carries the new history and gets the right gradient.
  Tensor fresh = y.narrow(0, 1, 2);
  sum(fresh).backward();
  expect_values(x.grad(), {0.0, 2.0, 2.0});
  // Without grad mode the stale view is just memory and may be read.
  NoGradGuard no_grad;
  expect_values(sum(v), {10.0});
}

TEST(Inplace, BroadcastingTheModifiedTensorIsAnError) {
  Tensor t = zeros({3}, {DType::Float64});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { t.add_(zeros({2, 3}, {DType::Float64})); });
  expect_contains(what, {"[add_]", "[3]", "[2, 3]", here(line)});
  Tensor i = tensor<int64_t>({1, 2});
  line = __LINE__ + 1;
  what = error_of([&] { i.mul_(0.5); });
  expect_contains(what, {"[mul_]", "int64[2] on cpu", here(line)});
  expect_values(i, {1.0, 2.0});
}

}  // namespace
}  // namespace kiln
