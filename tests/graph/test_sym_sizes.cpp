// Symbolic sizes (Note [symbolic sizes] in kiln/core/sym_int.h) and symbolic attrs (Note
// [symbolic attrs] in kiln/graph/graph.h): sizes computed from a traced tensor's size are
// recorded as expressions, so one trace serves every batch size; the graph text, the JSON
// document, the passes and the executor all keep them.
#include <gtest/gtest.h>

#include "kiln/core/sym_int.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/function.h"
#include "kiln/graph/serialize.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Tensors = std::vector<Tensor>;

TEST(SymInt, PlainIntegersInEagerCode) {
  Tensor x = randn({6, 4});
  const SymInt n = sym_size(x, 0);
  EXPECT_FALSE(n.is_symbolic());
  EXPECT_EQ(n.hint(), 6);
  const SymInt m = n * 2 + 1;
  EXPECT_FALSE(m.is_symbolic());
  EXPECT_EQ(static_cast<int64_t>(m), 13);
  EXPECT_EQ(sym_size(x, -1).hint(), 4);
  EXPECT_EQ(hints_of(sym_sizes(x)), (Shape{6, 4}));
  EXPECT_FALSE(any_symbolic(sym_sizes(x)));
}

TEST(SymInt, ExpressionsEvaluateFormatAndRoundTrip) {
  const SymInt b = SymInt::dim_of(0, 0, 11), s = SymInt::dim_of(2, 1, 5);
  const SymInt e = sym_max((b * 2 - 1) / 3 % 4, s + 7);
  EXPECT_TRUE(e.is_symbolic());
  EXPECT_EQ(e.hint(), std::max<int64_t>((11 * 2 - 1) / 3 % 4, 5 + 7));
  auto at = [](int64_t batch, int64_t len) {
    return [=](int v, int d) -> int64_t { return v == 0 && d == 0 ? batch : len; };
  };
  for (int64_t batch : {0, 1, 7, 64})
    for (int64_t len : {0, 3, 30})
      EXPECT_EQ(e.evaluate(at(batch, len)), std::max((batch * 2 - 1) / 3 % 4, len + 7));
  EXPECT_EQ(e.format(), "max((size(%0, 0) * 2 - 1) / 3 % 4, size(%2, 1) + 7)");
  const SymInt back = SymInt::from_json(e.to_json(), "test");
  EXPECT_TRUE(back.same_expression(e));
  EXPECT_FALSE(back.same_expression(b));
  EXPECT_EQ(back.evaluate(at(5, 9)), e.evaluate(at(5, 9)));
  test::expect_error([&] { (b / 0).evaluate(at(1, 1)); }, {"divided by zero"});
  for (const char* bad : {R"("x")", R"({"pow": [1, 2]})", R"({"add": [1]})", R"({"dim": [-1, 0]})",
                          R"({"dim": ["a", 0]})", R"({"add": [1, 2], "sub": [1, 2]})"})
    test::expect_error([&] { SymInt::from_json(nlohmann::json::parse(bad), "nodes[3]"); },
                       {"[SymInt] nodes[3]"});
}

// The idioms the issue names: a reshape, an expand and a factory sized from x.size(0) trace once
// and serve every batch size, 0 and 1 included, bit for bit with eager.
TEST(SymSizes, SizesFromTheBatchTraceOnceAndServeEverySize) {
  Tensor w = randn({12, 5});
  auto program = [&](const Tensor& x) {
    const SymInt n = sym_size(x, 0);
    Tensor flat = reshape(x, {n * 2, -1});  // [2*batch, 6]
    Tensor back = reshape(flat, {n, 12});   // [batch, 12]
    Tensor bias = expand(sum(reshape(w, {1, 12, 5}), {1}), {n, 5});
    Tensor ones = full({n, 1}, 0.5);
    return add(add(matmul(back, w), bias), ones);
  };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch", 3, 4}, DType::Float32, "x")}, {.name = "f"});
  for (int64_t batch : {1, 2, 9, 64}) {  // (batch 0: reshape to [0, -1] is an error in eager too)
    Tensor x = randn({batch, 3, 4});
    test::expect_bit_identical(f({x})[0], program(x));
  }
  EXPECT_EQ(f.stats().traces, 1);
  const std::string text = to_text(*f.graphs()[0]);
  test::expect_contains(
      text, {"shape=[size(%0, 0) * 2,-1]", ": float32[2*batch, 6]", "shape=[size(%0, 0),12]",
             "shape=[size(%0, 0),5]", "shape=[size(%0, 0),1]"});
}

// A size read from an intermediate value whose dim is no multiple of a symbol stays a leaf of
// that value, and the optimizer's passes keep the value it reads alive.
TEST(SymSizes, LeavesOfIntermediateValuesSurviveThePasses) {
  auto program = [](const Tensor& x) {
    Tensor pooled = max_pool2d(x, 2);  // [batch, 1, h/2, h/2]: h/2 is no multiple of h
    const SymInt half = sym_size(pooled, 2);
    Tensor unused = relu(pooled);  // read only for its size below
    return full({sym_size(unused, 0), half * half}, 1.0);
  };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch", 1, "h", "h"}, DType::Float32, "x")});
  for (int64_t h : {2, 5, 8}) {
    Tensor x = randn({3, 1, h, h});
    test::expect_bit_identical(f({x})[0], program(x));
  }
  EXPECT_EQ(f.stats().traces, 1);
}

TEST(SymSizes, StaticSizesFoldIntoPlainAttrs) {
  auto program = [](const Tensor& x) { return reshape(x, {sym_size(x, 1) * 4, -1}); };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch", 3, 4}, DType::Float32, "x")});
  const Graph& g = *f.graphs()[0];
  for (const Node& n : g.nodes) EXPECT_TRUE(n.sym_attrs.empty()) << to_text(g);
  test::expect_contains(to_text(g), {"shape=[12,-1]"});
}

TEST(SymSizes, TheDocumentKeepsThemAsVersion2) {
  auto program = [](const Tensor& x) { return reshape(x, {sym_size(x, 0) * 3, -1}); };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch", 3, 4}, DType::Float32, "x")}, {.optimize = false});
  const Graph& g = *f.graphs()[0];
  const nlohmann::json doc = to_json(g);
  EXPECT_EQ(doc["version"], 2);
  const Graph loaded = from_json(doc, {});
  EXPECT_EQ(to_json(loaded), doc);
  for (int64_t batch : {1, 6}) {
    Tensor x = randn({batch, 3, 4});
    test::expect_bit_identical(run(loaded, {x})[0], program(x));
  }
  // A graph without symbolic attrs stays version 1, which older kiln reads.
  Function plain =
      function([](const Tensors& in) { return Tensors{neg(in[0])}; }, {TensorSpec({"batch", 3})});
  EXPECT_EQ(to_json(*plain.graphs()[0])["version"], 1);

  // Forged documents are refused with the node and what is wrong.
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit,
                     const std::vector<std::string>& parts) {
    nlohmann::json d = doc;
    edit(d);
    test::expect_error([&] { from_json(d, {}); }, parts);
  };
  const size_t node = [&] {
    for (size_t i = 0; i < doc["nodes"].size(); ++i)
      if (doc["nodes"][i].contains("sym_attrs")) return i;
    return size_t{0};
  }();
  auto sym = [&](nlohmann::json& d) -> nlohmann::json& { return d["nodes"][node]["sym_attrs"][0]; };
  refused([&](nlohmann::json& d) { d["version"] = 1; }, {"has \"sym_attrs\", which version 1"});
  refused([&](nlohmann::json& d) { sym(d)["path"] = "/nope/0"; },
          {"symbolic attr '/nope/0'", "not a number in its attrs"});
  refused([&](nlohmann::json& d) { sym(d)["path"] = "shape"; }, {"not a JSON pointer"});
  refused(
      [&](nlohmann::json& d) {
        sym(d)["value"] = {{"dim", {99, 0}}};
      },
      {"reads the size of %99", "not defined before the node"});
  refused(
      [&](nlohmann::json& d) {
        sym(d)["value"] = {{"dim", {0, 7}}};
      },
      {"reads dim 7 of %0, which has rank 3"});
  refused([&](nlohmann::json& d) { sym(d)["value"] = 5; }, {"is the plain number 5"});
  refused(
      [&](nlohmann::json& d) {
        sym(d)["value"] = {{"cube", {1, 2}}};
      },
      {"unknown operation 'cube'"});
}

// A size that cannot be computed for a call (here: divided by a dim that is 0) is an error
// naming the op and the expression, not a crash.
TEST(SymSizes, AnAttrThatCannotBeComputedIsAnError) {
  auto program = [](const Tensor& x) {
    const SymInt n = sym_size(x, 0);
    return reshape(x, {n, n * 12 / n});
  };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch", 12})}, {.name = "g"});
  EXPECT_EQ(f({randn({3, 12})})[0].shape(), (Shape{3, 12}));
  test::expect_error(
      [&] {
        f({randn({0, 12})});
      },
      {"reshape", "cannot compute its attr /shape/1 = size(%0, 0) * 12 / size(%0, 0)",
       "divided by zero"});
}

// Note [size guards]: `x.size(0) == 1 ? 2 * x : x` is the same path at both probe sizes; the
// graph keeps the assumption, graph::function retraces a call that breaks it (the reason names
// the assumption and its line) and graph::run refuses one, naming them.
TEST(SizeGuards, AnAssumptionOnASizeIsCheckedOnEveryCall) {
  int line = 0;
  auto program = [&](const Tensor& x) {
    line = __LINE__ + 1;
    return sym_size(x, 0) == 1 ? mul(x, 2.0) : x;
  };
  Function f = function([&](const Tensors& in) { return Tensors{neg(program(in[0]))}; },
                        {TensorSpec({"batch", 3}, DType::Float32, "x")}, {.name = "f"});
  const std::string at = "test_sym_sizes.cpp:" + std::to_string(line);
  test::expect_contains(to_text(*f.graphs()[0]), {"guard size(%0, 0) == 1 is false  # " + at});
  for (int64_t batch : {0, 2, 7}) {
    Tensor x = randn({batch, 3});
    test::expect_bit_identical(f({x})[0], neg(program(x)));
  }
  const Tensor one = randn({1, 3});
  test::expect_bit_identical(f({one})[0], neg(program(one)));
  ASSERT_EQ(f.stats().retrace_reasons.size(), 1u);
  test::expect_contains(f.stats().retrace_reasons[0],
                        {"retracing 'f': batch != 1 was assumed at " + at,
                         "and this call has batch = 1 (traced at test_sym_sizes.cpp:"});
  test::expect_error(
      [&] { run(*f.graphs()[0], {one}); },
      {"graph 'f'", "breaks an assumption of its trace: batch != 1 was assumed at " + at,
       "this call has batch = 1"});
  // The document keeps the guard: a loaded graph checks it too.
  const nlohmann::json doc = to_json(*f.graphs()[0]);
  EXPECT_EQ(doc["version"], 2);
  const Graph loaded = from_json(doc, {});
  EXPECT_EQ(to_json(loaded), doc);
  test::expect_bit_identical(run(loaded, {ones({4, 3})})[0], neg(ones({4, 3})));
  test::expect_error([&] { run(loaded, {ones({1, 3})}); }, {"assumption of its trace", at});
  nlohmann::json bad = doc;
  bad["guards"][0]["compare"] = "=~";
  test::expect_error([&] { from_json(bad, {}); }, {"guards[0].compare is not a comparison"});
  bad = doc;
  bad["guards"][0]["a"] = {{"dim", {1, 0}}};
  test::expect_error([&] { from_json(bad, {}); }, {"which is not a graph input's dim"});
  bad = doc;
  bad["version"] = 1;
  test::expect_error([&] { from_json(bad, {}); }, {"has \"guards\", which version 1"});
}

// A comparison whose answer differs between the probe sizes is a trace error at its line.
TEST(SizeGuards, APathThatDependsOnTheSizeFailsTheTraceAtItsLine) {
  int line = 0;
  const std::string e = test::error_of([&] {
    function(
        [&](const Tensors& in) {
          line = __LINE__ + 1;
          return Tensors{sym_size(in[0], 0) > 12 ? neg(in[0]) : in[0]};
        },
        {TensorSpec({"batch", 3})}, {.name = "g"});
  });
  test::expect_contains(e, {"[trace] 'g' takes another path for another size",
                            "batch > 12 at test_sym_sizes.cpp:" + std::to_string(line),
                            "is false with batch = 11 and true with batch = 13"});
}

// Comparisons of static sizes always hold and leave no guard; eager comparisons record nothing.
TEST(SizeGuards, StaticSizesAndEagerCodeLeaveNoGuards) {
  Function f = function(
      [](const Tensors& in) { return Tensors{sym_size(in[0], 1) == 3 ? neg(in[0]) : in[0]}; },
      {TensorSpec({"batch", 3})});
  EXPECT_TRUE(f.graphs()[0]->guards.empty());
  EXPECT_TRUE(sym_size(ones({1, 3}), 0) == 1);
  EXPECT_TRUE(SymInt(4) >= 3 && 2 < SymInt(3) && SymInt(5) != 4);
}

}  // namespace
}  // namespace kiln::graph
