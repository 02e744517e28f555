// Linear + relu fusion in frozen graphs (Note [graph passes]): a linear and the relu that alone
// reads it become one fused_linear, oneDNN's matmul with post-ops.
#include "kiln/ops/fused_linear.h"
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

OptimizeOptions frozen() {
  OptimizeOptions o;
  o.freeze = true;
  return o;
}

TEST(FuseLinear, AnMlpInAFrozenGraphRunsOneFusedLinearPerLayer) {
  NoGradGuard inference;
  manual_seed(2);
  auto model = nn::mlp(20, {32, 16}, 5);
  model->eval();
  const Graph before = raw_trace([&](const Tensors& in) { return Tensors{(*model)(in[0])}; },
                                 {TensorSpec({"batch", 20})});
  const Graph after = optimize(before, frozen());
  EXPECT_EQ(count_nodes(before, "linear"), 3);
  EXPECT_EQ(count_nodes(after, "linear"), 0) << both(before, after);
  EXPECT_EQ(count_nodes(after, "relu"), 0);
  EXPECT_EQ(count_nodes(after, "fused_linear"), 3);
  kiln::test::expect_contains(to_text(after), {"activation=relu", "activation=none"});
  for (int64_t batch : {0, 1, 7, 64}) {
    Tensor x = randn({batch, 20});
    const Tensor want = run(before, {x})[0], got = run(after, {x})[0];
    kiln::test::expect_allclose(got, want, 1e-5);
  }
}

TEST(FuseLinear, ARelusInputWithAnotherReaderOrAnUnfrozenGraphStays) {
  NoGradGuard inference;
  Tensor w = randn({8, 4}), b = randn({8});
  auto fn = [&](const Tensors& in) {
    Tensor h = linear(in[0], w, b);
    return Tensors{relu(h), h * 2.0};
  };
  const Graph before = raw_trace(fn, {TensorSpec({"batch", 4})});
  const Graph after = optimize(before, frozen());
  EXPECT_EQ(count_nodes(after, "relu"), 1) << both(before, after);
  EXPECT_EQ(count_nodes(after, "fused_linear"), 1);
  kiln::test::expect_contains(to_text(after), {"activation=none"});
  kiln::test::expect_allclose(run(after, {ones({3, 4})})[0], run(before, {ones({3, 4})})[0], 1e-5);
  // Without freeze: untouched (a training graph stays bit for bit the eager computation).
  EXPECT_EQ(count_nodes(optimize(before), "fused_linear"), 0);
  // Skipped by name.
  OptimizeOptions skip = frozen();
  skip.skip = {"linear"};
  EXPECT_EQ(count_nodes(optimize(before, skip), "fused_linear"), 0);
}

TEST(FuseLinear, TheFusedOpHasLinearsErrorsAndGradients) {
  kiln::test::expect_error(
      [] {
        fused_linear(randn({2, 3}), randn({4, 5}), Tensor(), "relu");
      },
      {"[fused_linear] expected input [..., in_features] and weight [out_features, in_features]",
       "float32[2, 3]", "float32[4, 5]"});
  kiln::test::expect_error(
      [] {
        fused_linear(randn({2, 3}), randn({4, 3}), Tensor(), "gelu");
      },
      {"[fused_linear] expected activation \"relu\" or \"none\"", "gelu"});
  // Gradients equal the chain's.
  Tensor x = randn({5, 3}, {DType::Float64}), w = randn({4, 3}, {DType::Float64}),
         b = randn({4}, {DType::Float64});
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  const Tensors fused = kiln::grad({sum(fused_linear(x, w, b, "relu") * 3.0)}, {x, w, b});
  const Tensors chain = kiln::grad({sum(relu(linear(x, w, b)) * 3.0)}, {x, w, b});
  for (size_t i = 0; i < 3; ++i) kiln::test::expect_bit_identical(fused[i], chain[i]);
}

}  // namespace
}  // namespace kiln::graph
