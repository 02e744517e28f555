// optimize() (Note [graph passes]) and what every function gets from it; the executor's release
// of dead intermediates (Note [graph executor]).
#include <cstdlib>

#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

Tensors redundant(const Tensors& in) {
  Tensor unused = tanh(in[0]);
  Tensor a = relu(exp(in[0]) * 1.0);
  Tensor b = relu(exp(in[0]) * 1.0);
  return {a + b};
}

TEST(Optimize, RunsEveryPassUntilNothingChangesAndReportsWhatEachDid) {
  const Graph before = raw_trace(redundant, {TensorSpec({"batch", 4})});
  OptimizeReport report;
  std::vector<std::string> changed;
  OptimizeOptions options;
  options.after_pass = [&](const std::string& pass, const Graph&) { changed.push_back(pass); };
  const Graph after = optimize(before, options, &report);
  // tanh, 2 exp, 2 scalars, 2 mul, 2 relu, add -> exp, relu, add -> one fused node.
  EXPECT_EQ(count_nodes(after, "fused_elementwise"), 1) << both(before, after);
  EXPECT_EQ(after.nodes.size(), 1u) << both(before, after);
  EXPECT_EQ(report.nodes_before, static_cast<int>(before.nodes.size()));
  EXPECT_EQ(report.nodes_after, 1);
  kiln::test::expect_contains(report.format(), {"nodes -> 1", "simplify", "cse", "dce", "fuse"});
  EXPECT_NE(std::find(changed.begin(), changed.end(), "cse"), changed.end());
  EXPECT_NE(std::find(changed.begin(), changed.end(), "fuse"), changed.end());
  expect_same_results(before, after, {randn({3, 4})});
  OptimizeOptions unfused;
  unfused.skip = {"fuse"};
  const Graph chain = optimize(before, unfused);
  EXPECT_EQ(count_nodes(chain, "relu"), 1) << both(before, chain);
  EXPECT_EQ(chain.nodes.size(), 3u) << both(before, chain);
}

TEST(Optimize, APassCanBeSkippedByNameOrFromTheEnvironment) {
  const Graph before = raw_trace(redundant, {TensorSpec({"batch", 4})});
  OptimizeOptions no_cse;
  no_cse.skip = {"cse", "fuse"};
  OptimizeReport report;
  EXPECT_EQ(count_nodes(optimize(before, no_cse, &report), "relu"), 2);
  kiln::test::expect_contains(report.format(), {"cse       skipped"});
  setenv("KILN_GRAPH_SKIP_PASSES", "cse,simplify,fuse", 1);
  const Graph env = optimize(before);
  unsetenv("KILN_GRAPH_SKIP_PASSES");
  EXPECT_EQ(count_nodes(env, "relu"), 2);
  EXPECT_EQ(count_nodes(env, "mul"), 2);
  EXPECT_EQ(count_nodes(env, "tanh"), 0);
}

TEST(Optimize, AnUnknownPassIsAnErrorListingThePasses) {
  OptimizeOptions o;
  o.skip = {"cs"};
  kiln::test::expect_error(
      [&] { optimize(Graph{}, o); },
      {"unknown pass 'cs'", "simplify, cse, conv_bn, linear, fold, dce", "test_pipeline.cpp"});
}

TEST(Optimize, EveryFunctionIsOptimizedUnlessToldNot) {
  Function f = function(redundant, {TensorSpec({"batch", 4})});
  EXPECT_EQ(f.graphs()[0]->nodes.size(), 1u) << to_text(*f.graphs()[0]);
  ASSERT_EQ(f.stats().optimizations.size(), 1u);
  Tensor x = randn({5, 4});
  kiln::test::expect_bit_identical(f({x})[0], redundant({x})[0]);
  FunctionOptions off;
  off.optimize = false;
  Function g = function(redundant, {TensorSpec({"batch", 4})}, off);
  EXPECT_GT(g.graphs()[0]->nodes.size(), 1u);
  EXPECT_TRUE(g.stats().optimizations.empty());
}

TEST(Executor, AnIntermediateIsReleasedAfterItsLastReader) {
  // Twelve 1 MiB steps: holding every intermediate would peak near 12 MiB.
  auto chain = [](const Tensors& in) {
    Tensor y = in[0];
    for (int i = 0; i < 12; ++i) y = exp(neg(y));
    return Tensors{y};
  };
  const Graph g = raw_trace(chain, {TensorSpec({256, 1024})});
  Tensor x = randn({256, 1024});
  const int64_t mib = 1 << 20;
  run(g, {x});  // warm the caching allocator
  reset_peak_stats();
  const int64_t base = memory_stats().allocated_bytes;
  Tensor y = run(g, {x})[0];
  const int64_t peak = memory_stats().peak_allocated_bytes - base;
  EXPECT_LE(peak, 3 * mib) << "peak " << peak << " bytes above the inputs";
}

}  // namespace
}  // namespace kiln::graph
