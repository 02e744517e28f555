// The tracer (Note [tracer]) and the executor (Note [graph executor]) on hand-written functions.
#include <gtest/gtest.h>

#include "kiln/graph/executor.h"
#include "kiln/graph/tracer.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

Graph trace(const std::string& name, const std::vector<TensorSpec>& specs, const Fn& fn,
            int64_t probe = 3) {
  Tracer tracer(name);
  std::vector<Tensor> ins;
  for (const TensorSpec& s : specs) ins.push_back(tracer.add_input(s, probe));
  tracer.start();
  std::vector<Tensor> outs = fn(ins);
  return tracer.finish(outs);
}

TEST(Tracer, RecordsOneNodePerOpOnMetaAndCapturesParametersByIdentity) {
  Tensor w = randn({4, 3}), b = randn({4});
  int calls = 0;
  Fn fn = [&](const std::vector<Tensor>& in) {
    ++calls;
    EXPECT_TRUE(in[0].is_meta() || calls > 1);
    return std::vector<Tensor>{relu(linear(in[0], w, b))};
  };
  const Graph g = trace("mlp", {TensorSpec({"batch", 3}, DType::Float32, "x")}, fn);
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(g.nodes.size(), 2u) << to_text(g);
  EXPECT_STREQ(g.nodes[0].op->name(), "linear");
  EXPECT_STREQ(g.nodes[1].op->name(), "relu");
  ASSERT_EQ(g.captures.size(), 2u);
  EXPECT_EQ(g.captures[0].tensor.impl(), w.impl()) << "held by identity, not copied";
  EXPECT_EQ(g.captures[1].tensor.impl(), b.impl());
  EXPECT_EQ(g.value(g.inputs[0]).shape[0].symbol, "batch");

  Tensor x = randn({5, 3});
  test::expect_bit_identical(run(g, {x})[0], relu(linear(x, w, b)));
  // An update of a captured parameter is seen by the next call.
  {
    NoGradGuard no_grad;
    w.fill_(0.5);
  }
  test::expect_bit_identical(run(g, {x})[0], relu(linear(x, w, b)));
}

TEST(Tracer, TextNamesOpsAttrsTypesAndTheUsersLine) {
  const int line = __LINE__ + 3;
  const Graph g =
      trace("f", {TensorSpec({"batch", 6}, DType::Float32, "x")},
            [](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0], {1})}; });
  const std::string text = to_text(g);
  test::expect_contains(text, {"graph f(%0 x: float32[batch, 6]) {",
                               "%1 = sum(%0) {dims=[1], keepdim=false} : float32[3]",
                               "# test_tracer.cpp:" + std::to_string(line), "return %1"});
}

TEST(Tracer, ASymbolicDimRunsForEverySizeIncludingZeroAndOne) {
  Tensor w = randn({2, 3});
  const Graph g = trace("f", {TensorSpec({"batch", 3})}, [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(tanh(linear(in[0], w)), 2.0)};
  });
  for (int64_t batch : {0, 1, 2, 7}) {
    Tensor x = randn({batch, 3});
    const Tensor got = run(g, {x})[0];
    EXPECT_EQ(got.shape(), (Shape{batch, 2}));
    test::expect_bit_identical(got, mul(tanh(linear(x, w)), 2.0));
  }
}

TEST(Tracer, InPlaceUpdatesOfCapturedBuffersHappenOnEveryRun) {
  Tensor total = zeros({3});
  const Graph g = trace("accumulate", {TensorSpec({3})}, [&](const std::vector<Tensor>& in) {
    total.add_(in[0]);
    return std::vector<Tensor>{total};
  });
  EXPECT_EQ(total.to_vector<float>(), (std::vector<float>{0, 0, 0})) << "tracing wrote nothing";
  run(g, {tensor({1, 2, 3})});
  const Tensor out = run(g, {tensor({1, 2, 3})})[0];
  EXPECT_EQ(total.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(out.impl(), total.impl()) << "the output is the written buffer itself";
}

TEST(Tracer, AnInputReturnedAsIsIsTheGraphsOutput) {
  const Graph g =
      trace("identity", {TensorSpec({2})}, [](const std::vector<Tensor>& in) { return in; });
  EXPECT_TRUE(g.nodes.empty());
  Tensor x = tensor({1, 2});
  EXPECT_EQ(run(g, {x})[0].impl(), x.impl());
}

TEST(Tracer, AMetaTensorFromOutsideTheTraceIsAnError) {
  Tensor stray = empty({2}, {DType::Float32, kMeta});
  test::expect_error(
      [&] {
        trace("f", {TensorSpec({2})}, [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{add(in[0], stray)};
        });
      },
      {"[trace]", "'f'", "add reads", "meta tensor that is neither an input", "test_tracer.cpp"});
}

TEST(Tracer, ModesBelowTheTracerStillSeeTheCalls) {
  Tensor w = randn({3});
  w.set_requires_grad(true);
  Tensor traced_out;
  trace("f", {TensorSpec({3})}, [&](const std::vector<Tensor>& in) {
    traced_out = mul(in[0], w);
    return std::vector<Tensor>{traced_out};
  });
  EXPECT_NE(traced_out.grad_fn(), nullptr) << "the tape recorded the meta call";
}

TEST(Executor, InputsThatDoNotFitTheGraphAreErrorsNamingTheInput) {
  const Graph g =
      trace("pair",
            {TensorSpec({"batch", 3}, DType::Float32, "x"),
             TensorSpec({"batch", 3}, DType::Float32, "y")},
            [](const std::vector<Tensor>& in) { return std::vector<Tensor>{add(in[0], in[1])}; });
  Tensor x = randn({2, 3});
  test::expect_error([&] { run(g, {x}); }, {"[graph 'pair']", "expected 2 inputs, but got 1"});
  test::expect_error(
      [&] {
        run(g, {x, randn({2, 4})});
      },
      {"input 1 'y' expected float32[batch, 3]", "[2, 4]", "dim 1 must be 3"});
  test::expect_error(
      [&] {
        run(g, {x, x.to(DType::Float64)});
      },
      {"input 1 'y' expected float32[batch, 3]", "float64"});
  test::expect_error(
      [&] {
        run(g, {x, randn({5, 3})});
      },
      {"input 1 'y' has batch = 5 (dim 0), but an earlier input has batch = 2"});
  test::expect_error([&] { run(g, {x, Tensor()}); }, {"input 1 'y' is undefined"});
}

TEST(Executor, AnErrorInANodeNamesTheGraphTheNodeAndTheTracedLine) {
  const int line = __LINE__ + 3;
  const Graph g = trace(
      "pick", {TensorSpec({4}), TensorSpec({2}, DType::Int64)},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{gather(in[0], 0, in[1])}; });
  test::expect_error(
      [&] {
        run(g, {randn({4}), tensor({1, 9}, {DType::Int64})});
      },
      {"[gather]", "test_tracer.cpp:" + std::to_string(line),
       "in graph 'pick', node 0 'gather', traced at test_tracer.cpp:" + std::to_string(line)});
}

TEST(Executor, GradientsFlowThroughAGraphAsThroughEager) {
  Tensor w = randn({2, 3});
  w.set_requires_grad(true);
  const Graph g = trace("f", {TensorSpec({"batch", 3})}, [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sum(tanh(linear(in[0], w)))};
  });
  Tensor x = randn({4, 3});
  x.set_requires_grad(true);
  run(g, {x})[0].backward();
  const Tensor gw = w.grad(), gx = x.grad();
  w.set_grad(Tensor());
  x.set_grad(Tensor());
  sum(tanh(linear(x, w))).backward();
  test::expect_bit_identical(gw, w.grad());
  test::expect_bit_identical(gx, x.grad());
}

}  // namespace
}  // namespace kiln::graph
