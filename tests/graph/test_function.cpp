// kiln::graph::function: signatures and symbolic dims (Note [symbolic dims]) and the function
// cache without a signature (Note [function cache]).
#include <gtest/gtest.h>

#include <thread>

#include "kiln/graph/function.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Tensors = std::vector<Tensor>;

TEST(Function, ASignatureTracesOnceAndServesEverySize) {
  Tensor w = randn({5, 12});
  auto eager = [&](const Tensor& x) { return relu(linear(reshape(x, {-1, 12}), w)); };
  Function f = function([&](const Tensors& in) { return Tensors{eager(in[0])}; },
                        {TensorSpec({"batch", 3, 4}, DType::Float32, "x")}, {.name = "f"});
  for (int64_t batch : {0, 1, 2, 9}) {
    Tensor x = randn({batch, 3, 4});
    test::expect_bit_identical(f({x})[0], eager(x));
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().hits, 4);
  const std::string text = to_text(*f.graphs()[0]);
  test::expect_contains(
      text, {"%0 x: float32[batch, 3, 4]", ": float32[batch, 12]", ": float32[batch, 5]"});
}

TEST(Function, AProductOfASymbolIsNamedInTheText) {
  Function f = function([](const Tensors& in) { return Tensors{flatten(in[0])}; },
                        {TensorSpec({"batch", 3, 4})});
  EXPECT_NE(to_text(*f.graphs()[0]).find("float32[12*batch]"), std::string::npos)
      << to_text(*f.graphs()[0]);
}

TEST(Function, ACallThatDoesNotFitTheSignatureNamesTheInputTheSpecAndTheShape) {
  Function f = function([](const Tensors& in) { return Tensors{neg(in[0])}; },
                        {TensorSpec({"batch", 1, 28, 28}, DType::Float32, "x")}, {.name = "net"});
  test::expect_error(
      [&] {
        f({randn({8, 28, 28})});
      },
      {"[graph 'net']", "input 0 'x' expected float32[batch, 1, 28, 28]", "float32[8, 28, 28]",
       "test_function.cpp"});
}

// A size turned into a plain number (dim_size, or a Shape built from size()) is baked; the
// probe diff refuses it. (As SymInts the same sizes trace: tests/graph/test_size_apis.cpp.)
TEST(Function, ASizeBakedIntoAnAttributeIsAnErrorNamingTheOpTheDimAndTheLine) {
  int line = 0;
  auto baked = [&](const Tensors& in) {
    line = __LINE__ + 1;
    return Tensors{reshape(in[0], {in[0].dim_size(0) * 12})};
  };
  const std::string e = test::error_of([&] {
    function(baked, {TensorSpec({"batch", 3, 4})}, {.name = "f"});
  });
  test::expect_contains(
      e, {"[trace] 'f': reshape's attribute shape is [132] with batch = 11 and [156] with batch = "
          "13",
          "depends on the dynamic dim 'batch'", "take -1",
          "test_function.cpp:" + std::to_string(line)});
}

// A constant computed from a size made a number without kiln::SymInt (dim_size: a scalar
// divisor, a tensor built in C++) is named by the probe diff, with its values at both probe sizes
// and the line of the op that reads it. (Converting the SymInt itself fails earlier, at the
// conversion: tests/graph/test_size_guards.cpp.)
TEST(Function, AConstantComputedFromADynamicSizeNamesTheLineAndTheValues) {
  int line = 0;
  std::string e = test::error_of([&] {
    function(
        [&](const Tensors& in) {
          line = __LINE__ + 1;
          return Tensors{div(in[0], static_cast<double>(in[0].dim_size(0)))};
        },
        {TensorSpec({"batch", 3})}, {.name = "f"});
  });
  test::expect_contains(e, {"[trace] 'f'", "the constant that 'div' reads", "11.0 with batch = 11",
                            "13.0 with batch = 13", "the dynamic dim 'batch'",
                            "test_function.cpp:" + std::to_string(line)});
  e = test::error_of([&] {
    function(
        [&](const Tensors& in) {
          line = __LINE__ + 1;
          return Tensors{mul(in[0], tensor({static_cast<double>(in[0].dim_size(0)), 1.0, 2.0}))};
        },
        {TensorSpec({"batch", 3})}, {.name = "f"});
  });
  test::expect_contains(e, {"[trace] 'f'", "'mul' reads a tensor made outside kiln's ops",
                            "float32[3] [11, 1, 2] with batch = 11", "[13, 1, 2] with batch = 13",
                            "test_function.cpp:" + std::to_string(line)});
}

TEST(Function, AFactorySizedFromADynamicDimIsCaughtToo) {
  test::expect_error(
      [] {
        function(
            [](const Tensors& in) {
              return Tensors{add(in[0], zeros(Shape{in[0].dim_size(0), 2}))};
            },
            {TensorSpec({"n", 2})});
      },
      {"[trace]", "attribute shape", "the dynamic dim 'n'"});
}

// A loop bound by a symbolic size compares it on every iteration (Note [size guards]): the
// comparison whose answer differs between the probes fails the trace at its line. Bound by the
// plain number, the op lists differ instead.
TEST(Function, ALoopOverADynamicSizeIsAnError) {
  int line = 0;
  const std::string e = test::error_of([&] {
    function(
        [&](const Tensors& in) {
          Tensor acc = in[0];
          line = __LINE__ + 1;
          for (int64_t i = 0; i < in[0].size(0); ++i) acc = add(acc, 1.0);
          return Tensors{acc};
        },
        {TensorSpec({"batch"})});
  });
  test::expect_contains(e, {"[trace]", "takes another path for another size", "11 < batch",
                            "at test_function.cpp:" + std::to_string(line) + " is false"});
  test::expect_error(
      [] {
        function(
            [](const Tensors& in) {
              Tensor acc = in[0];
              for (int64_t i = 0; i < in[0].dim_size(0); ++i) acc = add(acc, 1.0);
              return Tensors{acc};
            },
            {TensorSpec({"batch"})});
      },
      {"[trace]", "runs different ops for different sizes of a dynamic dim"});
}

// A traced draw would repeat on every call (the compiled-dropout bug): refused until random
// draws are graph state.
// Random draws in graphs: tests/graph/test_effects.cpp.
TEST(Function, DropoutInEvalModeTracesToTheIdentity) {
  Function eval = function([](const Tensors& in) { return Tensors{dropout(in[0], 0.5, false)}; },
                           {TensorSpec({"batch", 4})});
  test::expect_bit_identical(eval({ones({3, 4})})[0], ones({3, 4}));
}

TEST(Function, WithoutASignatureEachNewKindOfCallRetracesAndSaysWhy) {
  std::vector<std::string> log;
  Function f =
      function([](const Tensors& in) { return Tensors{mul(in[0], 2.0)}; },
               {.name = "double", .logger = [&](const std::string& s) { log.push_back(s); }});
  const int line = __LINE__ + 1;
  f({ones({2, 3})});
  f({ones({2, 3})});
  EXPECT_TRUE(log.empty());
  test::expect_bit_identical(f({ones({2, 4})})[0], full({2, 4}, 2.0));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0],
            "retracing 'double': input 0 dim 1 changed 3 -> 4 (traced at test_function.cpp:" +
                std::to_string(line) + ")");
  f({ones({2, 4}, {DType::Float64})});
  EXPECT_NE(log.back().find("input 0 dtype changed float32 -> float64"), std::string::npos);
  {
    NoGradGuard no_grad;
    f({ones({2, 4}, {DType::Float64})});
  }
  EXPECT_NE(log.back().find("grad mode changed on -> off"), std::string::npos);
  f({ones({4, 2}).t()});
  EXPECT_NE(log.back().find("strides changed"), std::string::npos);
  const FunctionStats s = f.stats();
  EXPECT_EQ(s.traces, 5);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.retrace_reasons, std::vector<std::string>(log.begin(), log.end()));
}

TEST(Function, MoreRetracesThanTheBudgetIsAnErrorListingEveryReason) {
  Function f = function([](const Tensors& in) { return Tensors{neg(in[0])}; },
                        {.name = "g", .on_retrace = RetracePolicy::kSilent, .retrace_budget = 2});
  f({ones({1})});
  f({ones({2})});
  f({ones({3})});
  const std::string e = test::error_of([&] { f({ones({4})}); });
  test::expect_contains(
      e, {"[function 'g']", "retraced 3 times, more than its budget of 2", "dim 0 changed 1 -> 2",
          "dim 0 changed 2 -> 3", "dim 0 changed 3 -> 4", "signature"});
}

TEST(Function, RetracingCanBeMadeAnError) {
  Function f = function([](const Tensors& in) { return Tensors{neg(in[0])}; },
                        {.name = "strict", .on_retrace = RetracePolicy::kError});
  f({ones({1})});
  test::expect_error([&] { f({ones({2})}); },
                     {"retracing 'strict': input 0 dim 0 changed 1 -> 2", "is an error"});
}

TEST(Function, OneFunctionRunsOnSeveralThreadsAtOnce) {
  Tensor w = randn({4, 8});
  auto eager = [&](const Tensor& x) { return tanh(linear(x, w)); };
  Function f = function([&](const Tensors& in) { return Tensors{eager(in[0])}; },
                        {TensorSpec({"batch", 8})});
  std::vector<Tensor> xs;
  for (int t = 0; t < 4; ++t) xs.push_back(randn({t + 1, 8}));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const std::vector<double> want = eager(xs[t]).to_vector<double>();
      for (int i = 0; i < 50; ++i)
        if (f({xs[t]})[0].to_vector<double>() != want) ++mismatches[t];
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
  EXPECT_EQ(f.stats().hits, 200);
}

}  // namespace
}  // namespace kiln::graph
