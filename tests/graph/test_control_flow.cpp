// kiln::cond and kiln::while_loop, eager and traced (Note [control flow]).
#include <gtest/gtest.h>

#include "kiln/graph/executor.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Tensors = std::vector<Tensor>;

Tensors twice(const Tensors& o) {
  return {mul(o[0], 2.0)};
}
Tensors negated(const Tensors& o) {
  return {neg(o[0])};
}

Tensor branchy(const Tensor& x) {
  return kiln::cond(gt(sum(x), 0.0), twice, negated, {x})[0];
}

TEST(ControlFlow, EagerCondRunsOneBranchAndIsDifferentiable) {
  Tensor x = tensor({1.0, 2.0}).set_requires_grad(true);
  Tensor y = branchy(x);
  test::expect_bit_identical(y, tensor({2.0, 4.0}));
  sum(y).backward();
  test::expect_bit_identical(x.grad(), tensor({2.0, 2.0}));
  test::expect_bit_identical(branchy(tensor({-1.0, -2.0})), tensor({1.0, 2.0}));
  test::expect_error([] { kiln::cond(ones({2}), twice, negated, {ones({1})}); },
                     {"[cond] expected a predicate of one element", "float32[2]"});
}

TEST(ControlFlow, ATracedCondServesBothBranchesAndEverySize) {
  Function f = function([](const Tensors& in) { return Tensors{branchy(in[0])}; },
                        {TensorSpec({"batch", 3}, DType::Float32, "x")}, {.name = "branchy"});
  const Graph& g = *f.graphs()[0];
  test::expect_contains(to_text(g), {"cond(", "then=<graph 'then': 2 nodes>",
                                     "else=<graph 'else': 1 nodes>", "test_control_flow.cpp"});
  std::vector<Tensor> captured;
  for (const Capture& c : g.captures) captured.push_back(c.tensor);
  const Graph loaded = from_json(nlohmann::json::parse(to_json(g).dump()), captured);
  EXPECT_EQ(to_json(loaded), to_json(g));
  for (int64_t batch : {0, 1, 4})
    for (double sign : {1.0, -1.0}) {
      Tensor x = mul(rand({batch, 3}), sign);
      test::expect_bit_identical(f({x})[0], branchy(x));
      test::expect_bit_identical(run(loaded, {x})[0], branchy(x));
    }
  EXPECT_EQ(f.stats().traces, 1);
}

TEST(ControlFlow, BranchesMayReadParametersAndValuesOfTheEnclosingFunction) {
  Tensor w = randn({3});
  auto fn = [&](const Tensor& x) {
    Tensor h = mul(x, 3.0);
    return kiln::cond(
        gt(sum(x), 0.0), [&](const Tensors& o) { return Tensors{add(mul(o[0], w), h)}; },
        [&](const Tensors& o) { return Tensors{sub(o[0], w)}; }, {x})[0];
  };
  Function f =
      function([&](const Tensors& in) { return Tensors{fn(in[0])}; }, {TensorSpec({"batch", 3})});
  for (double sign : {1.0, -1.0}) {
    Tensor x = mul(rand({5, 3}), sign);
    test::expect_bit_identical(f({x})[0], fn(x));
  }
  // An optimizer step on w is seen by the next call: w is an input of the node, by identity.
  w.mul_(2.0);
  Tensor x = rand({2, 3});
  test::expect_bit_identical(f({x})[0], fn(x));
}

TEST(ControlFlow, GradientsThroughATracedCondEqualEager) {
  Tensor w = randn({3}).set_requires_grad(true);
  auto fn = [&](const Tensor& x) {
    return kiln::cond(
        gt(sum(x), 0.0), [&](const Tensors& o) { return Tensors{mul(mul(o[0], o[0]), w)}; },
        [&](const Tensors& o) { return Tensors{sub(o[0], w)}; }, {x})[0];
  };
  Function f =
      function([&](const Tensors& in) { return Tensors{fn(in[0])}; }, {TensorSpec({"batch", 3})});
  for (double sign : {1.0, -1.0}) {
    SCOPED_TRACE(sign);
    Tensor x0 = mul(rand({4, 3}), sign);
    Tensor xe = x0.detach().clone().set_requires_grad(true);
    Tensor xg = x0.detach().clone().set_requires_grad(true);
    Tensor seed = randn({4, 3});
    sum(mul(fn(xe), seed)).backward();
    const Tensor we = w.grad().clone();
    w.set_grad(Tensor());
    sum(mul(f({xg})[0], seed)).backward();
    test::expect_bit_identical(xg.grad(), xe.grad());
    test::expect_bit_identical(w.grad(), we);
    w.set_grad(Tensor());
  }
}

// Branches whose vjps read saved values or wrapped numbers (tanh, sigmoid, 1 - t, 1 / t): the
// gradient's branches are traced on meta stand-ins without reading data.
TEST(ControlFlow, GradientsThroughATracedCondWithSavedValuesEqualEager) {
  auto fn = [&](const Tensor& x) {
    return kiln::cond(
        gt(sum(x), 0.0),
        [&](const Tensors& o) { return Tensors{mul(tanh(o[0]), sub(1.0, sigmoid(o[0])))}; },
        [&](const Tensors& o) { return Tensors{div(1.0, add(exp(o[0]), 1.0))}; }, {x})[0];
  };
  Function f =
      function([&](const Tensors& in) { return Tensors{fn(in[0])}; }, {TensorSpec({"batch", 4})});
  for (double sign : {1.0, -1.0}) {
    SCOPED_TRACE(sign);
    Tensor x0 = mul(add(rand({3, 4}), 0.1), sign);
    Tensor xe = x0.detach().clone().set_requires_grad(true);
    Tensor xg = x0.detach().clone().set_requires_grad(true);
    Tensor seed = randn({3, 4});
    sum(mul(fn(xe), seed)).backward();
    sum(mul(f({xg})[0], seed)).backward();
    test::expect_bit_identical(xg.grad(), xe.grad());
  }
}

// A parameter only the untaken branch reads gets no gradient, in eager code and in a graph.
TEST(ControlFlow, AnInputOnlyTheUntakenBranchReadsGetsNoGradient) {
  Tensor p = randn({4}).set_requires_grad(true);
  auto fn = [&](const Tensor& x) {
    return kiln::cond(
        gt(sum(x), 0.0), [&](const Tensors& o) { return Tensors{mul(o[0], 3.0)}; },
        [&](const Tensors& o) { return Tensors{mul(o[0], p)}; }, {x})[0];
  };
  Function f =
      function([&](const Tensors& in) { return Tensors{fn(in[0])}; }, {TensorSpec({"batch", 4})});
  Tensor x = add(rand({2, 4}), 0.1).set_requires_grad(true);
  const Tensors eager = kiln::grad({sum(fn(x))}, {x, p}, {}, false, false, true);
  const Tensors graph = kiln::grad({sum(f({x})[0])}, {x, p}, {}, false, false, true);
  EXPECT_FALSE(eager[1].defined());
  EXPECT_FALSE(graph[1].defined());
  test::expect_bit_identical(graph[0], eager[0]);
  // The branch that reads it: the same gradient both ways.
  Tensor y = neg(x).detach().set_requires_grad(true);
  const Tensors eager_p = kiln::grad({sum(fn(y))}, {y, p}, {}, false, false, true);
  const Tensors graph_p = kiln::grad({sum(f({y})[0])}, {y, p}, {}, false, false, true);
  test::expect_bit_identical(graph_p[1], eager_p[1]);
  test::expect_bit_identical(graph_p[0], eager_p[0]);
}

TEST(ControlFlow, BranchesOfDifferentShapesFailTheTraceNamingTheOutputs) {
  const int line = __LINE__ + 2;
  auto fn = [&](const Tensors& in) {
    return kiln::cond(
        gt(sum(in[0]), 0.0), twice, [](const Tensors& o) { return Tensors{sum(o[0], {1})}; }, in);
  };
  test::expect_error(
      [&] {
        function(fn, {TensorSpec({"batch", 3})});
      },
      {"[cond] expected then_fn and else_fn to return tensors of the same dtypes and "
       "shapes, but output 0 is float32[11, 3] from then_fn and float32[11] from "
       "else_fn",
       "test_control_flow.cpp:" + std::to_string(line)});
}

// Doubles x until its sum reaches 100, at most `max` times.
Tensors doubling(const Tensor& x, int64_t max) {
  return kiln::while_loop([](const Tensors& v) { return Tensors{lt(sum(v[0]), 100.0)}; },
                          [](const Tensors& v) { return Tensors{mul(v[0], 2.0)}; }, {x}, max);
}

TEST(ControlFlow, EagerAndTracedWhileLoopsAgreeForEveryTripCount) {
  Function f = function([](const Tensors& in) { return doubling(in[0], 50); },
                        {TensorSpec({"batch"}, DType::Float32, "x")}, {.name = "doubling"});
  test::expect_contains(to_text(*f.graphs()[0]),
                        {"while_loop(", "cond=<graph 'cond'", "max_iterations=50"});
  for (Tensor x : {ones({1}), full({3}, 40.0), full({4}, 0.01), full({2}, 200.0)})
    test::expect_bit_identical(f({x})[0], doubling(x, 50)[0]);
  // max_iterations bounds the loop, eager and traced.
  Function capped =
      function([](const Tensors& in) { return doubling(in[0], 3); }, {TensorSpec({"batch"})});
  test::expect_bit_identical(capped({ones({2})})[0], full({2}, 8.0));
  test::expect_bit_identical(doubling(ones({2}), 3)[0], full({2}, 8.0));
}

TEST(ControlFlow, ALoopBodyThatChangesAShapeFailsTheTrace) {
  auto grows = [](const Tensors& in) {
    return kiln::while_loop([](const Tensors& v) { return Tensors{lt(sum(v[0]), 100.0)}; },
                            [](const Tensors& v) {
                              return Tensors{cat({v[0], v[0]}, 0)};
                            },
                            in, 10);
  };
  test::expect_error([&] { function(grows, {TensorSpec({"batch"})}); },
                     {"[while_loop] expected body_fn to keep each loop var's dtype and shape, but "
                      "loop var 0 is float32[11] and body_fn returns float32[22]",
                      "test_control_flow.cpp"});
  test::expect_error([&] { kiln::while_loop(grows, grows, {ones({1})}, -1); },
                     {"expected max_iterations >= 0, but got -1"});
}

// Note [while_loop gradient]: backward through a graph's while_loop recomputes the iterates and
// equals eager backward through the same loop, for the loop var and a parameter the body reads,
// at several trip counts (0 included). Tracing that backward is an error naming the loop.
TEST(ControlFlow, BackwardThroughAGraphsWhileLoopEqualsEager) {
  Tensor w = mul(randn({3}), 0.5).set_requires_grad(true);
  auto loop = [&](const Tensor& x) {
    return kiln::while_loop(
        [](const Tensors& v) { return Tensors{lt(sum(abs(v[0])), 20.0)}; },
        [&](const Tensors& v) { return Tensors{add(mul(v[0], 1.5), mul(tanh(v[0]), w))}; }, {x},
        30)[0];
  };
  Function f =
      function([&](const Tensors& in) { return Tensors{loop(in[0])}; }, {TensorSpec({"batch", 3})});
  for (double scale : {0.1, 1.0, 30.0}) {
    SCOPED_TRACE(scale);
    Tensor x0 = mul(add(rand({2, 3}), 0.1), scale);
    Tensor xe = x0.detach().clone().set_requires_grad(true);
    Tensor xg = x0.detach().clone().set_requires_grad(true);
    Tensor seed = randn({2, 3});
    sum(mul(loop(xe), seed)).backward();
    const Tensor we = w.grad().defined() ? w.grad().clone() : Tensor();
    w.set_grad(Tensor());
    sum(mul(f({xg})[0], seed)).backward();
    test::expect_bit_identical(xg.grad(), xe.grad());
    ASSERT_EQ(w.grad().defined(), we.defined());
    if (we.defined()) test::expect_bit_identical(w.grad(), we);
    w.set_grad(Tensor());
  }
  test::expect_error(
      [&] {
        function([&](const Tensors& in) { return kiln::grad({sum(loop(in[0]))}, {w}); },
                 {TensorSpec({"batch", 3})});
      },
      {"[while_loop] a while_loop's gradient cannot be traced", "test_control_flow.cpp"});
}

}  // namespace
}  // namespace kiln::graph
