// backward(): accumulation into .grad, leaves and non-leaves, the grad_fn chain, detach.
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

TEST(Backward, AccumulatesIntoLeafGradAcrossCalls) {
  Tensor x = leaf({1.0, 2.0, -3.0});
  Tensor w = leaf({0.5, -1.0, 2.0});
  Tensor loss = sum(add(mul(x, x), mul(x, w)));  // d/dx = 2x + w, d/dw = x
  EXPECT_FALSE(x.grad().defined());
  loss.backward({}, /*retain_graph=*/true);
  expect_values(x.grad(), {2.5, 3.0, -4.0});
  expect_values(w.grad(), {1.0, 2.0, -3.0});
  EXPECT_FALSE(x.grad().requires_grad());
  loss.backward();
  expect_values(x.grad(), {5.0, 6.0, -8.0});
  expect_values(w.grad(), {2.0, 4.0, -6.0});
  // A third backward of a fresh graph keeps accumulating; set_grad(Tensor()) clears.
  x.set_grad(Tensor());
  sum(mul(x, 3.0)).backward();
  expect_values(x.grad(), {3.0, 3.0, 3.0});
}

TEST(Backward, ExplicitGradOutputAndMultipleRoots) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor y = mul(x, x);
  y.backward(tensor({1.0, 0.5, -1.0}, {DType::Float64}));
  expect_values(x.grad(), {2.0, 2.0, -6.0});
  Tensor a = leaf({1.0, 2.0});
  Tensor p = mul(a, 3.0), q = exp(a);
  backward({p, sum(q)}, {tensor({1.0, 2.0}, {DType::Float64}), Tensor()});
  expect_values(a.grad(), {3.0 + std::exp(1.0), 6.0 + std::exp(2.0)});
}

TEST(Backward, BroadcastAndReusedInputs) {
  Tensor a = leaf({1.0, 2.0, 3.0, 4.0, 5.0, 6.0});
  Tensor a2 = a.reshape({2, 3});
  Tensor b = leaf({10.0, 20.0, 30.0});
  sum(mul(add(a2, b), b)).backward();  // L = sum((a + b) b)
  expect_values(a.grad(), {10, 20, 30, 10, 20, 30});
  // dL/db_j = sum_i (a_ij + 2 b_j)
  expect_values(b.grad(), {1 + 4 + 40, 2 + 5 + 80, 3 + 6 + 120});
}

TEST(Backward, NonLeafGradOnlyWithRetainGrad) {
  Tensor x = leaf({1.0, -2.0});
  Tensor y = mul(x, 3.0);
  Tensor z = mul(x, 2.0);
  z.retain_grad();
  EXPECT_TRUE(z.retains_grad());
  EXPECT_FALSE(y.retains_grad());
  Tensor loss = sum(add(mul(y, y), mul(z, z)));
  loss.backward({}, true);
  EXPECT_FALSE(y.grad().defined());
  expect_values(z.grad(), {4.0, -8.0});    // 2z
  expect_values(x.grad(), {26.0, -52.0});  // 18x + 8x
  loss.backward();
  expect_values(z.grad(), {8.0, -16.0});  // retained grads accumulate like leaves'
  EXPECT_FALSE(y.grad().defined());
  x.retain_grad();  // no-op on a leaf
  EXPECT_FALSE(x.retains_grad());
}

TEST(Backward, GradFnChainAndIsLeaf) {
  Tensor x = leaf({1.0, 2.0});
  Tensor c = tensor({1.0, 1.0}, {DType::Float64});
  Tensor y = exp(x);
  Tensor z = mul(y, 2.0);
  Tensor s = sum(add(z, c));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(c.is_leaf());
  EXPECT_FALSE(c.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(x.grad_fn() == nullptr);
  ASSERT_TRUE(s.grad_fn() != nullptr);
  EXPECT_EQ(s.grad_fn()->name(), "sum");
  const auto& add_node = s.grad_fn()->next_edges.at(0).fn;
  EXPECT_EQ(add_node->name(), "add");
  EXPECT_TRUE(add_node->next_edges.at(1).fn == nullptr);  // c needs no gradient
  const auto& mul_node = add_node->next_edges.at(0).fn;
  EXPECT_EQ(mul_node->name(), "mul");
  EXPECT_TRUE(mul_node == z.grad_fn());
  EXPECT_TRUE(mul_node->next_edges.at(1).fn == nullptr);  // the wrapped scalar 2.0
  const auto& exp_node = mul_node->next_edges.at(0).fn;
  EXPECT_EQ(exp_node->name(), "exp");
  auto* acc = dynamic_cast<autograd::AccumulateGrad*>(exp_node->next_edges.at(0).fn.get());
  ASSERT_NE(acc, nullptr);
  EXPECT_EQ(acc->name(), "AccumulateGrad");
  EXPECT_TRUE(acc->leaf().is_same(x));
  // Every use of a leaf shares its accumulator.
  Tensor w = mul(x, x);
  EXPECT_EQ(w.grad_fn()->next_edges[0].fn.get(), acc);
  EXPECT_EQ(w.grad_fn()->next_edges[1].fn.get(), acc);
  // Later nodes have larger sequence numbers (they run first in backward).
  EXPECT_LT(exp_node->sequence_nr, mul_node->sequence_nr);
}

TEST(Backward, DetachSharesStorageAndCutsHistory) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 3.0);
  Tensor d = y.detach();
  EXPECT_TRUE(d.storage() == y.storage());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.grad_fn() == nullptr);
  EXPECT_TRUE(y.requires_grad());
  d.add_(1.0);  // writes through to y's memory
  expect_values(y, {4.0, 7.0});
  // Nothing flows through a detached tensor.
  sum(add(mul(y, 1.0), mul(d, 100.0))).backward();
  expect_values(x.grad(), {3.0, 3.0});
  Tensor dx = kiln::detach(x);
  EXPECT_FALSE(dx.requires_grad());
  EXPECT_TRUE(x.requires_grad());
}

TEST(Backward, RequiresGradOnlyOnFloatingLeaves) {
  Tensor i = tensor<int64_t>({1, 2, 3});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { i.set_requires_grad(true); });
  expect_contains(what, {"[requires_grad_]", "floating-point", "int64[3] on cpu",
                         "test_backward.cpp:" + std::to_string(line)});
  EXPECT_FALSE(i.requires_grad());
  Tensor x = leaf({1.0});
  Tensor y = mul(x, 2.0);
  line = __LINE__ + 1;
  what = error_of([&] { y.set_requires_grad(false); });
  expect_contains(what, {"[requires_grad_]", "non-leaf", "detach()",
                         "test_backward.cpp:" + std::to_string(line)});
  // Integer results of differentiable inputs carry no history.
  Tensor am = argmax(mul(x, 1.0));
  EXPECT_FALSE(am.requires_grad());
  // Float32 works too, and gradients keep the leaf's dtype.
  Tensor f = tensor({1.0, 2.0});
  f.set_requires_grad(true);
  sum(mul(f, f)).backward();
  EXPECT_EQ(f.grad().dtype(), DType::Float32);
  expect_values(f.grad(), {2.0, 4.0});
}

TEST(Backward, MixedDtypesGiveEachLeafItsOwnDtype) {
  Tensor a = leaf({1.0, 2.0});
  Tensor b = tensor({3.0, 4.0});
  b.set_requires_grad(true);
  Tensor y = mul(a, b);  // float64
  EXPECT_EQ(y.dtype(), DType::Float64);
  sum(y).backward();
  EXPECT_EQ(a.grad().dtype(), DType::Float64);
  EXPECT_EQ(b.grad().dtype(), DType::Float32);
  expect_values(a.grad(), {3.0, 4.0});
  expect_values(b.grad(), {1.0, 2.0});
}

TEST(Backward, DeepChainDoesNotOverflowTheStack) {
  Tensor x = leaf({0.5});
  {
    Tensor y = x;
    for (int i = 0; i < 10000; ++i) y = add(y, x);
    y.backward();
    expect_values(x.grad(), {10001.0});
    expect_values(y, {0.5 * 10001});
  }  // the 10000-node graph is freed here
  x.set_grad(Tensor());
  {
    // The same with ops that save their inputs (the saved tensors keep the chain alive too).
    Tensor y = x;
    for (int i = 0; i < 10000; ++i) y = mul(y, 1.0);
    Tensor loss = sum(y);
    loss.backward({}, true);
    expect_values(x.grad(), {1.0});
  }
}

TEST(Backward, LongGraphIsFreedWithoutRecursion) {
  // Without Note [iterative graph deletion] freeing this chain recursed once per node and
  // overflowed the stack (at ~25k nodes in a Debug build).
  Tensor x = leaf({1.0});
  Tensor y = x;
  for (int i = 0; i < 40000; ++i) y = mul(add(y, x), 0.5);
  EXPECT_TRUE(y.requires_grad());
  y = Tensor();  // frees 80000 nodes
  EXPECT_TRUE(x.is_leaf());
}

TEST(Backward, GradientsOfViews) {
  Tensor x = leaf({1.0, 2.0, 3.0, 4.0, 5.0, 6.0});
  Tensor m = x.reshape({2, 3});
  Tensor t = m.transpose(0, 1);  // [3, 2]
  Tensor row = t.select(0, 1);   // x[1], x[4]
  sum(mul(row, tensor({10.0, 20.0}, {DType::Float64}))).backward();
  expect_values(x.grad(), {0, 10, 0, 0, 20, 0});
}

}  // namespace
}  // namespace kiln
