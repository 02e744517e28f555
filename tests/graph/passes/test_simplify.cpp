// Algebraic simplification (Note [graph passes]): identities go, results stay bit for bit.
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

Graph simplified(const Graph& before) {
  Graph after = before;
  passes::simplify(after);
  passes::eliminate_dead_code(after);
  after.validate();
  return after;
}

TEST(Simplify, MultiplyingByOneAndAddingZeroAreGone) {
  const Graph before = raw_trace(
      [](const Tensors& in) {
        Tensor y = relu(in[0]);
        return Tensors{sigmoid(((1.0 * (y * 1.0) + 0.0) / 1.0 - 0.0) + y)};
      },
      {TensorSpec({"batch", 5})});
  const Graph after = simplified(before);
  EXPECT_EQ(count_nodes(after, "mul"), 0) << both(before, after);
  EXPECT_EQ(count_nodes(after, "div"), 0);
  EXPECT_EQ(count_nodes(after, "sub"), 0);
  EXPECT_EQ(count_nodes(after, "add"), 1) << "the final + y stays";
  EXPECT_EQ(count_nodes(after, "full"), 0) << "the scalars went with their uses";
  expect_same_results(before, after, {randn({6, 5})});
}

TEST(Simplify, AnIdentityThatPromotesOrBroadcastsStays) {
  // int32 * a float32 1 is float32; [3] + zeros [2, 3] is [2, 3]: neither result is x.
  Tensor z = zeros({2, 3});
  const Graph before = raw_trace(
      [&](const Tensors& in) {
        Tensor i = relu(in[0]);
        return Tensors{mul(i, full({}, 1.0, {DType::Float32})), relu(in[1]) + z};
      },
      {TensorSpec({3}, DType::Int32), TensorSpec({3})});
  const Graph after = simplified(before);
  EXPECT_EQ(count_nodes(after, "mul"), 1) << both(before, after);
  EXPECT_EQ(count_nodes(after, "add"), 1);
}

TEST(Simplify, AnOutputIsNotTheCallersOwnTensor) {
  // x * 1 returns new memory in eager code; the graph must not hand back its input.
  const Graph before =
      raw_trace([](const Tensors& in) { return Tensors{in[0] * 1.0}; }, {TensorSpec({3})});
  const Graph after = simplified(before);
  EXPECT_EQ(count_nodes(after, "mul"), 1) << both(before, after);
  Tensor x = randn({3});
  EXPECT_NE(run(after, {x})[0].storage(), x.storage());
}

TEST(Simplify, ADoubleTransposeIsTheValueItself) {
  const Graph before = raw_trace(
      [](const Tensors& in) {
        Tensor y = exp(in[0]);
        return Tensors{relu(transpose(transpose(y, 0, 2), 0, 2)),
                       permute(permute(y, {1, 2, 0}), {0, 2, 1})};
      },
      {TensorSpec({2, 3, 4})});
  const Graph after = simplified(before);
  // The first pair cancels; the second becomes one permute (of y's dims 1, 0, 2).
  EXPECT_EQ(count_nodes(before, "permute"), 4);
  EXPECT_EQ(count_nodes(after, "permute"), 1) << both(before, after);
  kiln::test::expect_contains(to_text(after), {"permute(%1) {dims=[1,0,2]}"});
  expect_same_results(before, after, {randn({2, 3, 4})});
}

TEST(Simplify, AReshapeChainIsOneReshape) {
  const Graph before = raw_trace(
      [](const Tensors& in) {
        Tensor y = exp(in[0]);
        Tensor same = reshape(y, {-1, 3, 4});
        return Tensors{reshape(reshape(reshape(same, {-1, 12}), {-1, 6, 2}), {-1, 4, 3})};
      },
      {TensorSpec({"batch", 3, 4})});
  const Graph after = simplified(before);
  EXPECT_EQ(count_nodes(after, "reshape") + count_nodes(after, "view"), 1) << both(before, after);
  for (int64_t batch : {1, 3}) expect_same_results(before, after, {randn({batch, 3, 4})});
}

}  // namespace
}  // namespace kiln::graph
