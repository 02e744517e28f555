// Common-subexpression elimination (Note [graph passes]).
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

TEST(Cse, TheSameOpOnTheSameValuesRunsOnce) {
  Tensor w = randn({6, 4});
  Graph before = raw_trace(
      [&](const Tensors& in) {
        Tensor a = relu(linear(in[0], w));
        Tensor b = relu(linear(in[0], w));
        return Tensors{a + b, sigmoid(b)};
      },
      {TensorSpec({"batch", 4})});
  Graph after = before;
  ASSERT_TRUE(passes::eliminate_common_subexpressions(after));
  EXPECT_EQ(count_nodes(before, "relu"), 2);
  EXPECT_EQ(count_nodes(after, "relu"), 1) << both(before, after);
  EXPECT_EQ(count_nodes(after, "linear"), 1);
  after.validate();
  expect_same_results(before, after, {randn({7, 4})});
  expect_same_results(before, after, {randn({0, 4})});
}

TEST(Cse, DifferentAttrsAreDifferentOps) {
  Graph before =
      raw_trace([](const Tensors& in) { return Tensors{sum(in[0], {0}) + sum(in[0], {1})}; },
                {TensorSpec({4, 4})});
  Graph after = before;
  EXPECT_FALSE(passes::eliminate_common_subexpressions(after)) << to_text(after);
}

TEST(Cse, AReadAfterAWriteIsNotTheEarlierRead) {
  Tensor buffer = ones({3});
  Graph before = raw_trace(
      [&](const Tensors& in) {
        Tensor a = buffer * 2.0;
        buffer.copy_(in[0]);
        Tensor b = buffer * 2.0;
        return Tensors{a, b};
      },
      {TensorSpec({3})});
  Graph after = before;
  passes::eliminate_common_subexpressions(after);
  EXPECT_EQ(count_nodes(after, "mul"), 2) << both(before, after);
  Tensor x = randn({3});
  buffer.copy_(ones({3}));
  const Tensors out = run(after, {x});
  kiln::test::expect_bit_identical(out[0], full({3}, 2.0));
  kiln::test::expect_bit_identical(out[1], x * 2.0);
}

TEST(Cse, TwoOutputsOfTheGraphStayTwoTensors) {
  Graph before = raw_trace(
      [](const Tensors& in) {
        return Tensors{exp(in[0]), exp(in[0])};
      },
      {TensorSpec({3})});
  Graph after = before;
  passes::eliminate_common_subexpressions(after);
  const Tensors out = run(after, {randn({3})});
  EXPECT_NE(out[0].storage(), out[1].storage()) << to_text(after);
}

}  // namespace
}  // namespace kiln::graph
