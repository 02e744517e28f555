// Conv + batch-norm fusion in frozen graphs (Note [graph passes]): separate Conv2d, BatchNorm2d
// and ReLU modules become conv2d_affine, as nn::conv_bn computes them.
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

struct Block {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  Block() {
    manual_seed(4);
    conv1 = std::make_shared<nn::Conv2d>(3, 8, 3, Conv2dOptions{.padding = 1});
    conv2 = std::make_shared<nn::Conv2d>(8, 8, 3, Conv2dOptions{.padding = 1}, /*bias=*/false);
    bn1 = std::make_shared<nn::BatchNorm2d>(8);
    bn2 = std::make_shared<nn::BatchNorm2d>(8);
    for (auto* bn : {bn1.get(), bn2.get()}) {  // statistics a trained model would have
      bn->running_mean.copy_(randn({8}));
      bn->running_var.copy_(rand({8}) + 0.5);
      bn->weight.detach().copy_(randn({8}));
      bn->eval();
    }
  }
  // conv-bn-relu, then conv-bn + residual, relu: a ResNet basic block from separate modules.
  Tensors operator()(const Tensors& in) {
    Tensor y = relu((*bn1)((*conv1)(in[0])));
    return {relu((*bn2)((*conv2)(y)) + y)};
  }
};

TEST(ConvBn, SeparateModulesFuseIntoConv2dAffineInAFrozenGraph) {
  NoGradGuard inference;
  Block block;
  const Graph before =
      raw_trace([&](const Tensors& in) { return block(in); }, {TensorSpec({"batch", 3, 6, 6})});
  OptimizeOptions frozen;
  frozen.freeze = true;
  const Graph after = optimize(before, frozen);
  EXPECT_EQ(count_nodes(before, "batch_norm_eval"), 2);
  EXPECT_EQ(count_nodes(after, "batch_norm_eval"), 0) << both(before, after);
  EXPECT_EQ(count_nodes(after, "conv2d"), 0);
  EXPECT_EQ(count_nodes(after, "relu"), 0);
  EXPECT_EQ(count_nodes(after, "add"), 0) << "the residual add is the second conv's epilogue";
  EXPECT_EQ(count_nodes(after, "conv2d_affine"), 2);
  EXPECT_EQ(count_nodes(after, "conv_bn_fold"), 0) << "fold computed the scales once";
  kiln::test::expect_contains(to_text(after), {"relu=true"});
  for (int64_t batch : {1, 5}) {
    Tensor x = randn({batch, 3, 6, 6});
    kiln::test::expect_allclose(run(after, {x})[0], run(before, {x})[0], 1e-5);
  }
}

TEST(ConvBn, WithoutFreezeOrWithAnotherReaderTheChainStays) {
  NoGradGuard inference;
  Block block;
  const Graph before =
      raw_trace([&](const Tensors& in) { return block(in); }, {TensorSpec({"batch", 3, 6, 6})});
  Graph g = before;
  EXPECT_FALSE(passes::fuse_conv_bn(g, /*freeze=*/false));
  // The batch norm's output is also returned: it fuses, but the relu after it cannot.
  const Graph shared = raw_trace(
      [&](const Tensors& in) {
        Tensor b = (*block.bn1)((*block.conv1)(in[0]));
        return Tensors{b, relu(b)};
      },
      {TensorSpec({"batch", 3, 6, 6})});
  OptimizeOptions frozen;
  frozen.freeze = true;
  const Graph after = optimize(shared, frozen);
  EXPECT_EQ(count_nodes(after, "conv2d_affine"), 1) << both(shared, after);
  EXPECT_EQ(count_nodes(after, "relu"), 1);
  kiln::test::expect_contains(to_text(after), {"relu=false"});
  Tensor x = randn({2, 3, 6, 6});
  const Tensors want = run(shared, {x}), got = run(after, {x});
  kiln::test::expect_allclose(got[0], want[0], 1e-5);
  kiln::test::expect_allclose(got[1], want[1], 1e-5);
}

}  // namespace
}  // namespace kiln::graph
