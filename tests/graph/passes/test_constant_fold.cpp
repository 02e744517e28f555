// Constant folding (Note [graph passes]): with freeze, work on captures alone runs once.
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

// small_cnn in evaluation mode: each conv_bn folds its batch norm (conv_bn_fold) on every call.
Graph raw_cnn(const std::shared_ptr<nn::Module>& model) {
  FunctionOptions options;
  options.optimize = false;
  return *nn::function(model, {TensorSpec({"batch", 1, 8, 8})}, options).graphs()[0];
}

TEST(ConstantFold, AFrozenInferenceGraphFoldsItsBatchNormsOnce) {
  NoGradGuard inference;  // conv_bn then runs conv2d_affine, the fused inference op
  manual_seed(3);
  auto model = nn::small_cnn(1, 10, 8);
  model->eval();
  const Graph before = raw_cnn(model);
  Graph after = before;
  ASSERT_TRUE(passes::fold_constants(after, /*freeze=*/true));
  passes::eliminate_dead_code(after);
  after.validate();
  EXPECT_EQ(count_nodes(before, "conv_bn_fold"), 2);
  EXPECT_EQ(count_nodes(after, "conv_bn_fold"), 0) << both(before, after);
  EXPECT_EQ(count_nodes(after, "conv2d_affine"), 2);
  // The running statistics are no longer held; the folded scale and shift are.
  EXPECT_LT(after.nodes.size(), before.nodes.size());
  for (int64_t batch : {1, 4}) expect_same_results(before, after, {randn({batch, 1, 8, 8})});
}

TEST(ConstantFold, WithoutFreezeNothingFoldsAndAStateChangeIsSeen) {
  manual_seed(3);
  auto model = nn::small_cnn(1, 10, 8);
  model->eval();
  Graph g = raw_cnn(model);
  EXPECT_FALSE(passes::fold_constants(g, /*freeze=*/false));
  // The default compile (no freeze) sees a new running mean on the next call.
  graph::Function f = nn::function(model, {TensorSpec({"batch", 1, 8, 8})});
  Tensor x = randn({2, 1, 8, 8});
  Tensor first = f({x})[0];
  for (auto [name, t] : model->state_dict())
    if (name == "bn1.running_mean") t.fill_(0.5);
  Tensor second = f({x})[0];
  kiln::test::expect_bit_identical(second, model->forward(x));
  EXPECT_GT(max(abs(first - second)).item(), 0.0);
}

TEST(ConstantFold, ACaptureTheGraphWritesIsNotAConstant) {
  Tensor buffer = ones({3});
  Graph before = raw_trace(
      [&](const Tensors& in) {
        Tensor doubled = exp(buffer);
        buffer.copy_(in[0]);
        return Tensors{doubled + exp(buffer)};
      },
      {TensorSpec({3})});
  Graph after = before;
  EXPECT_FALSE(passes::fold_constants(after, /*freeze=*/true)) << to_text(after);
}

}  // namespace
}  // namespace kiln::graph
