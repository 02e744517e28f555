// Layout assignment (Note [layout pass]). The pass asks the CPU whether channels-last training
// pays; these tests force the answer both ways, so they run the same on every CPU.
#include <cstdlib>

#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

// Sets KILN_CHANNELS_LAST_TRAINING for one scope.
struct ForceChannelsLast {
  explicit ForceChannelsLast(bool on) { setenv("KILN_CHANNELS_LAST_TRAINING", on ? "1" : "0", 1); }
  ~ForceChannelsLast() { unsetenv("KILN_CHANNELS_LAST_TRAINING"); }
};

// Two conv / batch-norm / relu blocks with a residual add, a pooled head, the loss and every
// parameter's gradient: a training step's graph.
struct Net {
  explicit Net(DType dt, int64_t in_channels = 3) {
    const TensorOptions o{dt};
    w1 = (randn({8, in_channels, 3, 3}, o) * 0.3).set_requires_grad(true);
    w2 = (randn({8, 8, 3, 3}, o) * 0.2).set_requires_grad(true);
    g1 = ones({8}, o).set_requires_grad(true);
    b1 = zeros({8}, o).set_requires_grad(true);
    fc = (randn({8, 4}, o) * 0.3).set_requires_grad(true);
  }
  Tensors operator()(const Tensors& in, bool train = true) const {
    Conv2dOptions same;
    same.padding = 1;
    const Tensor h =
        relu(batch_norm(conv2d(in[0], w1, Tensor(), same), Tensor(), Tensor(), g1, b1, true));
    const Tensor r = relu(conv2d(h, w2, Tensor(), same) + h);
    const Tensor logits = matmul(flatten(adaptive_avg_pool2d(r, 1), 1), fc);
    const Tensor loss = sum(logits * logits);
    if (!train) return {loss};
    Tensors out = kiln::grad({loss}, {w1, w2, g1, b1, fc});
    out.insert(out.begin(), loss);
    return out;
  }
  Tensor w1, w2, g1, b1, fc;
};

constexpr int64_t kBatch = 4;

Graph step_graph(const Net& net, DType dt, int64_t channels = 3) {
  return raw_trace([&net](const Tensors& in) { return net(in); },
                   {TensorSpec({kBatch, channels, 12, 12}, dt)});
}

TEST(Layout, ATrainingGraphsImageInputIsLaidOutChannelsLastOnce) {
  const ForceChannelsLast on(true);
  const Net net(DType::Float32);
  const Graph before = step_graph(net, DType::Float32);
  Graph after = before;
  ASSERT_TRUE(passes::assign_layouts(after)) << to_text(before);
  after.validate();
  // permute -> clone -> permute at the top, and the convolution reads the copy.
  ASSERT_GE(after.nodes.size(), 3u);
  EXPECT_STREQ(after.nodes[0].op->name(), "permute");
  EXPECT_STREQ(after.nodes[1].op->name(), "clone");
  EXPECT_STREQ(after.nodes[2].op->name(), "permute");
  EXPECT_EQ(after.nodes[0].inputs, std::vector<int>{after.inputs[0]});
  for (size_t n = 3; n < after.nodes.size(); ++n)
    for (int in : after.nodes[n].inputs) EXPECT_NE(in, after.inputs[0]) << both(before, after);
  // A second run finds nothing more to do.
  Graph again = after;
  EXPECT_FALSE(passes::assign_layouts(again));
  // The values agree with the NCHW graph's (other kernels, so within float32 rounding).
  const Tensors in{randn({kBatch, 3, 12, 12})};
  const Tensors want = run(before, in), got = run(after, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) kiln::test::expect_allclose(got[i], want[i], 1e-4);
}

TEST(Layout, NothingChangesWhereChannelsLastDoesNotPay) {
  const Net net(DType::Float32), net64(DType::Float64), gray(DType::Float32, 1);
  {
    // The CPU's answer: NCHW is faster (AVX2).
    const ForceChannelsLast off(false);
    Graph g = step_graph(net, DType::Float32);
    EXPECT_FALSE(passes::assign_layouts(g));
  }
  const ForceChannelsLast on(true);
  // Float64 convolutions are kiln's own loops.
  Graph g64 = step_graph(net64, DType::Float64);
  EXPECT_FALSE(passes::assign_layouts(g64));
  // One channel: NCHW and NHWC are the same memory.
  Graph g1 = step_graph(gray, DType::Float32, 1);
  EXPECT_FALSE(passes::assign_layouts(g1));
  // An inference graph: its convolutions keep their own kernel choice.
  Graph infer = raw_trace(
      [&net](const Tensors& in) {
        NoGradGuard no_grad;
        return net(in, false);
      },
      {TensorSpec({"batch", 3, 12, 12})});
  EXPECT_FALSE(passes::assign_layouts(infer)) << to_text(infer);
}

TEST(Layout, TheCompiledStepRunsItAndCanSkipIt) {
  const ForceChannelsLast on(true);
  const Net net(DType::Float32);
  const auto make = [&net](bool skip) {
    FunctionOptions options;
    options.name = "step";
    options.record_tape = false;
    if (skip) options.passes.skip = {"layout"};
    return function([&net](const Tensors& in) { return net(in); },
                    {TensorSpec({kBatch, 3, 12, 12})}, options);
  };
  Function with = make(false), without = make(true);
  const Tensors in{randn({kBatch, 3, 12, 12})};
  const Tensors got = with(in), want = without(in);
  EXPECT_EQ(count_nodes(*with.graphs()[0], "clone"),
            count_nodes(*without.graphs()[0], "clone") + 1);
  for (size_t i = 0; i < got.size(); ++i) kiln::test::expect_allclose(got[i], want[i], 1e-4);
  // The planned replay gives the recording run's results.
  const Tensors replay = with(in);
  for (size_t i = 0; i < got.size(); ++i) kiln::test::expect_bit_identical(replay[i], got[i]);
}

}  // namespace
}  // namespace kiln::graph
