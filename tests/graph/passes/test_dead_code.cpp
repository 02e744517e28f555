// Dead-code elimination (Note [graph passes]): unread pure nodes go, effects stay.
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

TEST(DeadCode, AnUnreadComputationAndTheCaptureOnlyItReadIsRemoved) {
  Tensor w = randn({4, 4});
  Graph before = raw_trace(
      [&](const Tensors& in) {
        Tensor unused = exp(matmul(in[0], w));
        return Tensors{relu(in[0])};
      },
      {TensorSpec({"batch", 4})});
  Graph after = before;
  ASSERT_TRUE(passes::eliminate_dead_code(after));
  EXPECT_EQ(count_nodes(before, "exp"), 1);
  EXPECT_EQ(count_nodes(after, "exp"), 0) << both(before, after);
  EXPECT_EQ(count_nodes(after, "matmul"), 0);
  EXPECT_EQ(count_nodes(after, "relu"), 1);
  EXPECT_EQ(before.captures.size(), 1u);
  EXPECT_TRUE(after.captures.empty()) << "the graph still holds w";
  after.validate();
  expect_same_results(before, after, {randn({5, 4})});
  EXPECT_FALSE(passes::eliminate_dead_code(after)) << "a second run finds nothing";
}

TEST(DeadCode, AnUnreadRandomDrawStaysSoLaterDrawsMatchEager) {
  auto fn = [](const Tensors& in) {
    Tensor unused = dropout(in[0], 0.5, /*training=*/true);
    return Tensors{dropout(in[0], 0.5, /*training=*/true)};
  };
  Graph before = raw_trace(fn, {TensorSpec({"batch", 16})});
  Graph after = before;
  passes::eliminate_dead_code(after);
  EXPECT_EQ(count_nodes(after, "bernoulli"), 2) << both(before, after);
  Tensor x = randn({3, 16});
  manual_seed(5);
  Tensor want = fn({x})[0];
  manual_seed(5);
  Tensor got = run(after, {x})[0];
  kiln::test::expect_bit_identical(got, want);
}

TEST(DeadCode, AWriteToACaptureStaysThoughNothingReadsItsResult) {
  Tensor buffer = zeros({3});
  Graph before = raw_trace(
      [&](const Tensors& in) {
        buffer.copy_(in[0]);
        return Tensors{neg(in[0])};
      },
      {TensorSpec({3})});
  Graph after = before;
  passes::eliminate_dead_code(after);
  EXPECT_EQ(count_nodes(after, "copy_"), 1) << both(before, after);
  Tensor x = randn({3});
  run(after, {x});
  kiln::test::expect_bit_identical(buffer, x);
}

}  // namespace
}  // namespace kiln::graph
