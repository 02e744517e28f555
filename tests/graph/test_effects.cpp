// Sound capture of effects in traced graphs: running statistics (Note [running statistics]),
// random draws (Note [random effects]), factories sized by an input (Note [like factories]) and
// reads of a stand-in's values (Note [value reads]).
#include <gtest/gtest.h>

#include "kiln/graph/function.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Tensors = std::vector<Tensor>;

// Training-mode batch norm on [batch, 4] with its own running statistics.
struct TrainBn {
  Tensor mean = zeros({4}), var = ones({4});
  Tensor operator()(const Tensor& x) { return batch_norm(x, mean, var, {}, {}, true, 0.1); }
};

TEST(GraphEffects, TrainingBatchNormTracedWithASymbolicBatchUpdatesItsStatisticsLikeEager) {
  TrainBn traced, eager;
  Function f = function([&](const Tensors& in) { return Tensors{traced(in[0])}; },
                        {TensorSpec({"batch", 4}, DType::Float32, "x")}, {.name = "bn"});
  // The graph holds no size: the count n comes from x in running_stat_update's kernel.
  const std::string text = to_text(*f.graphs()[0]);
  test::expect_contains(text, {"running_stat_update", "unbiased=true"});
  for (int64_t batch : {2, 7, 3}) {
    Tensor x = randn({batch, 4});
    test::expect_bit_identical(f({x})[0], eager(x));
    test::expect_bit_identical(traced.mean, eager.mean);
    test::expect_bit_identical(traced.var, eager.var);
  }
}

TEST(GraphEffects, AnEmptyBatchLeavesTheStatisticsAndABatchOfOneIsTheEagerError) {
  TrainBn bn;
  Function f = function([&](const Tensors& in) { return Tensors{bn(in[0])}; },
                        {TensorSpec({"batch", 4})}, {.name = "bn"});
  f({randn({0, 4})});
  test::expect_bit_identical(bn.mean, zeros({4}));
  test::expect_bit_identical(bn.var, ones({4}));
  test::expect_error(
      [&] {
        f({randn({1, 4})});
      },
      {"[running_stat_update] expected more than 1 value per channel when training",
       "float32[1, 4]", "(in graph 'bn', node", "test_effects.cpp"});
}

TEST(GraphEffects, ATracedDropoutDrawsNewMasksOnEveryCallExactlyAsEagerDoes) {
  auto net = [](const Tensor& x) { return dropout(relu(x), 0.5, true); };
  Function f = function([&](const Tensors& in) { return Tensors{net(in[0])}; },
                        {TensorSpec({"batch", 64}, DType::Float32, "x")}, {.name = "drop"});
  Tensor x = rand({5, 64}, {}) + 0.5;
  manual_seed(7);
  Tensor e1 = net(x), e2 = net(x);
  manual_seed(7);
  Tensor g1 = f({x})[0], g2 = f({x})[0];
  test::expect_bit_identical(g1, e1);
  test::expect_bit_identical(g2, e2);
  // Not the compiled-dropout bug: the second call has its own mask.
  EXPECT_GT(sum(ne(g1, g2)).item(), 0) << "two calls gave the same mask";
  // Another batch size draws a mask of its size from the same stream.
  manual_seed(9);
  Tensor e3 = net(x.narrow(0, 0, 3));
  manual_seed(9);
  test::expect_bit_identical(f({x.narrow(0, 0, 3)})[0], e3);
}

TEST(GraphEffects, ARandomFactoryTracedWithoutASignatureDrawsFreshNumbersPerCall) {
  Function f = function([](const Tensors& in) { return Tensors{add(in[0], randn_like(in[0]))}; },
                        {.name = "noise"});
  Tensor x = zeros({3, 3});
  manual_seed(1);
  Tensor e1 = add(x, randn_like(x)), e2 = add(x, randn_like(x));
  manual_seed(1);
  test::expect_bit_identical(f({x})[0], e1);
  test::expect_bit_identical(f({x})[0], e2);
  EXPECT_EQ(f.stats().traces, 1);
}

TEST(GraphEffects, ADrawFromAnotherGeneratorFailsTheTrace) {
  Generator gen(5);
  test::expect_error(
      [&] {
        function([&](const Tensors& in) { return Tensors{dropout(in[0], 0.5, true, &gen)}; },
                 {TensorSpec({"batch", 4})}, {.name = "own_gen"});
      },
      {"[trace] bernoulli draws from a generator other than kiln's default one",
       "test_effects.cpp"});
}

TEST(GraphEffects, LikeFactoriesTakeTheirShapeFromTheInputSoASymbolicBatchWorks) {
  auto fn = [](const Tensor& x) { return add(mul(x, ones_like(x)), full_like(x, 2.0)); };
  Function f = function([&](const Tensors& in) { return Tensors{fn(in[0]) + zeros_like(in[0])}; },
                        {TensorSpec({"batch", 3})});
  for (int64_t batch : {0, 1, 6}) {
    Tensor x = randn({batch, 3});
    test::expect_bit_identical(f({x})[0], fn(x));
  }
  EXPECT_NE(to_text(*f.graphs()[0]).find("like=true"), std::string::npos);
}

TEST(GraphEffects, ReadingAValueWhileTracingNamesTheFunctionTheValueAndTheLine) {
  int line = 0;
  auto reads_item = [&](const Tensors& in) {
    line = __LINE__ + 1;
    if (sum(in[0]).item() > 0) return Tensors{in[0]};
    return Tensors{neg(in[0])};
  };
  const std::string e = test::error_of([&] {
    function(reads_item, {TensorSpec({"batch", 3}, DType::Float32, "x")}, {.name = "branchy"});
  });
  test::expect_contains(e, {"[trace] 'branchy' reads the value of %", ": float32[] (item)",
                            "a graph cannot depend on data this way",
                            "use kiln::cond / kiln::where, or make it an input",
                            "test_effects.cpp:" + std::to_string(line)});
}

TEST(GraphEffects, EveryKindOfValueReadFailsTheTrace) {
  const std::vector<std::pair<std::string, Function::Fn>> reads = {
      {"(to_vector)",
       [](const Tensors& in) {
         (void)in[0].to_vector<float>();
         return in;
       }},
      {"(data)",
       [](const Tensors& in) {
         (void)in[0].data<float>();
         return in;
       }},
      {"(print)",
       [](const Tensors& in) {
         (void)in[0].to_string();
         return in;
       }},
  };
  for (const auto& [what, fn] : reads)
    test::expect_error(
        [&] {
          function(fn, {TensorSpec({"batch", 3}, DType::Float32, "x")});
        },
        {"[trace] 'function' reads the value of %0: float32[batch, 3] ('x')", what});
  // The hook is gone after a failed trace: a meta tensor prints again.
  EXPECT_NE(empty({2}, {DType::Float32, kMeta}).to_string().find("device='meta'"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::graph
