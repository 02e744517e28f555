// Rematerialization (Note [rematerialization]).
#include "kiln/graph/memory_planner.h"
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

// A two-block conv / batch-norm / relu network with a residual add, its loss and the gradients of
// all its parameters, as a training step traces it.
struct TinyResNet {
  explicit TinyResNet(DType dt) {
    const TensorOptions o{dt};
    for (Tensor* w : {&w1, &w2, &w3}) *w = (randn({8, 8, 3, 3}, o) * 0.2).set_requires_grad(true);
    w1 = (randn({8, 3, 3, 3}, o) * 0.3).set_requires_grad(true);
    for (Tensor* g : {&g1, &g2, &g3}) *g = ones({8}, o).set_requires_grad(true);
    for (Tensor* b : {&b1, &b2, &b3}) *b = zeros({8}, o).set_requires_grad(true);
  }
  Tensor block(const Tensor& x, const Tensor& w, const Tensor& g, const Tensor& b) const {
    Conv2dOptions same;
    same.padding = 1;
    return batch_norm(conv2d(x, w, Tensor(), same), Tensor(), Tensor(), g, b, true);
  }
  Tensors operator()(const Tensors& in) const {
    const Tensor h1 = relu(block(in[0], w1, g1, b1));
    const Tensor h2 = relu(block(h1, w2, g2, b2));
    const Tensor h3 = relu(block(h2, w3, g3, b3) + h1);
    const Tensor loss = sum(h3 * h3);
    Tensors out = kiln::grad({loss}, {w1, w2, w3, g1, g2, g3, b1, b2, b3});
    out.insert(out.begin(), loss);
    return out;
  }
  Tensor w1, w2, w3, g1, g2, g3, b1, b2, b3;
};

// A static batch: the loss's sum has an expand in its gradient, whose shape would be the batch.
constexpr int64_t kBatch = 16;

Function step_function(const TinyResNet& net, DType dt, bool remat) {
  FunctionOptions options;
  options.name = "step";
  options.record_tape = false;
  if (!remat) options.passes.skip = {"remat"};
  return function([&net](const Tensors& in) { return net(in); },
                  {TensorSpec({kBatch, 3, 16, 16}, dt)}, options);
}

Graph trace_step(const TinyResNet& net, DType dt, bool remat) {
  return *step_function(net, dt, remat).graphs()[0];
}

// The arena of f's memory plan for `inputs` (Note [memory planner]): the intermediates' peak.
int64_t planned_arena_bytes(Function& f, const Tensors& inputs) {
  f(inputs);  // records the plan
  f(inputs);  // replays it
  const std::vector<MemoryPlannerStats> stats = f.memory_stats();
  EXPECT_EQ(stats.size(), 1u);
  EXPECT_TRUE(stats[0].last_plan.has_value());
  EXPECT_EQ(stats[0].diverged, 0);
  return stats[0].last_plan ? stats[0].last_plan->arena_bytes : 0;
}

TEST(Remat, ATrainingStepRecomputesItsActivationsBitForBitAndPeaksLower) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    const TinyResNet net(dt);
    Function kept_fn = step_function(net, dt, false), recomputed_fn = step_function(net, dt, true);
    const Graph kept = *kept_fn.graphs()[0], recomputed = *recomputed_fn.graphs()[0];
    // The relus' outputs (and the fused add + relu's) are computed again in the backward pass,
    // each from its batch_norm, instead of staying alive across the peak.
    EXPECT_EQ(count_nodes(kept, "batch_norm"), 3);
    EXPECT_GT(count_nodes(recomputed, "batch_norm"), 3) << both(kept, recomputed);
    const Tensors in{randn({kBatch, 3, 16, 16}, {dt})};
    expect_same_results(kept, recomputed, in);
    const int64_t before = planned_arena_bytes(kept_fn, in);
    const int64_t after = planned_arena_bytes(recomputed_fn, in);
    EXPECT_LT(after, before) << both(kept, recomputed);
  }
}

TEST(Remat, AGraphWithoutABackwardPassIsLeftAsItIs) {
  const TinyResNet net(DType::Float32);
  Graph g = raw_trace(
      [&](const Tensors& in) {
        NoGradGuard no_grad;
        return Tensors{relu(
            net.block(relu(net.block(in[0], net.w1, net.g1, net.b1)), net.w2, net.g2, net.b2))};
      },
      {TensorSpec({"batch", 3, 16, 16})});
  EXPECT_FALSE(passes::rematerialize(g)) << to_text(g);
}

// a = exp(buffer) is alive across the peak (the third matmul, with p, p2 and p3 alive) and read
// after it; computing it again there is right unless buffer is written in between.
Graph exp_across_a_peak(Tensor& buffer, bool write) {
  return raw_trace(
      [&buffer, write](const Tensors& in) {
        Tensor a = exp(buffer);
        Tensor p = matmul(in[0], in[0]);
        Tensor p3 = matmul(matmul(p, p), p);
        if (write) buffer.copy_(in[0]);
        return Tensors{a + p3};
      },
      {TensorSpec({64, 64})});
}

TEST(Remat, AValueIsComputedAgainAfterThePeakWhenThatLowersIt) {
  Tensor buffer = randn({64, 64});
  const Graph before = exp_across_a_peak(buffer, false);
  Graph after = before;
  ASSERT_TRUE(passes::rematerialize(after)) << to_text(after);
  after.validate();
  // One exp still, now right before the add (the original had no other reader).
  ASSERT_EQ(count_nodes(after, "exp"), 1);
  EXPECT_EQ(std::string(after.nodes[after.nodes.size() - 2].op->name()), "exp") << to_text(after);
  expect_same_results(before, after, {randn({64, 64})});
}

TEST(Remat, NothingIsRecomputedFromMemoryWrittenInBetween) {
  Tensor buffer = randn({64, 64});
  Graph g = exp_across_a_peak(buffer, true);
  const std::string text = to_text(g);
  EXPECT_FALSE(passes::rematerialize(g)) << to_text(g);
  EXPECT_EQ(to_text(g), text);
  const Tensor original = buffer.clone(), x = randn({64, 64});
  const Tensors out = run(g, {x});
  const Tensor p = matmul(x, x);
  kiln::test::expect_bit_identical(out[0], exp(original) + matmul(matmul(p, p), p));
}

TEST(Remat, CanBeSkippedByName) {
  const std::vector<std::string>& names = pass_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "remat"), names.end());
  const TinyResNet net(DType::Float32);
  const Graph kept = trace_step(net, DType::Float32, false);
  EXPECT_EQ(count_nodes(kept, "batch_norm"), 3);
}

}  // namespace
}  // namespace kiln::graph
