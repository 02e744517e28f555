// Size guards (Note [size guards] in kiln/core/sym_int.h): what a symbolic trace assumed of its
// sizes — a comparison, a conversion to a number, inside a branch too — is kept, and a call that
// breaks it gets a graph specialized to its sizes, with the reason; never a silently wrong result.
#include <gtest/gtest.h>

#include "kiln/core/sym_int.h"
#include "kiln/graph/control_flow.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/function.h"
#include "kiln/graph/serialize.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Tensors = std::vector<Tensor>;

FunctionOptions quiet(std::string name, RetracePolicy policy = RetracePolicy::kSilent) {
  FunctionOptions o;
  o.name = std::move(name);
  o.on_retrace = policy;
  return o;
}

// `if (batch == 1)` traced at the probes assumes batch != 1; batch 1 retraces once, specialized,
// and later calls at batch 1 reuse that graph while the others keep the symbolic one.
TEST(SizeGuards, ACallThatBreaksAnAssumptionRetracesWithTheReason) {
  int line = 0;
  auto program = [&](const Tensor& x) {
    line = __LINE__ + 1;
    if (x.size(0) == 1) return mul(x, 2.0);
    return sub(x, 1.0);
  };
  std::vector<std::string> log;
  FunctionOptions o = quiet("f", RetracePolicy::kLog);
  o.logger = [&](const std::string& s) { log.push_back(s); };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch", 3}, DType::Float32, "x")}, o);
  for (int64_t batch : {5, 1, 7, 1, 2}) {
    const Tensor x = randn({batch, 3});
    test::expect_bit_identical(f({x})[0], program(x));
  }
  const FunctionStats st = f.stats();
  EXPECT_EQ(st.traces, 2);
  ASSERT_EQ(log.size(), 1u);
  test::expect_contains(
      log[0],
      {"retracing 'f': batch != 1 was assumed at test_size_guards.cpp:" + std::to_string(line),
       "and this call has batch = 1", "(traced at test_size_guards.cpp:"});
  EXPECT_FALSE(f.graphs()[0]->guards.empty());
  EXPECT_TRUE(f.graphs()[1]->guards.empty());  // static: batch 1 only
  EXPECT_EQ(f.graphs()[1]->value(f.graphs()[1]->inputs[0]).shape[0].size, 1);
}

TEST(SizeGuards, UnderRetracePolicyErrorTheBrokenAssumptionIsTheError) {
  Function f =
      function([](const Tensors& in) { return Tensors{in[0].size(0) > 4 ? neg(in[0]) : in[0]}; },
               {TensorSpec({"batch", 3})}, quiet("strict", RetracePolicy::kError));
  test::expect_bit_identical(f({ones({6, 3})})[0], neg(ones({6, 3})));
  test::expect_error(
      [&] {
        f({ones({2, 3})});
      },
      {"retracing 'strict': batch > 4 was assumed at test_size_guards.cpp:",
       "this call has batch = 2", "retracing is an error for it"});
}

// A size converted to a number is the guard that it keeps that number: it depends on the batch,
// so the probes disagree and the trace fails at the conversion's line, naming the size.
TEST(SizeGuards, ASizeConvertedToANumberFailsTheTraceAtTheConversion) {
  int line = 0;
  std::string e = test::error_of([&] {
    function(
        [&](const Tensors& in) {
          line = __LINE__ + 1;
          const int64_t n = in[0].size(0);
          return Tensors{reshape(in[0], {n, -1})};
        },
        {TensorSpec({"batch", 3, 4})}, quiet("f"));
  });
  test::expect_contains(e, {"[trace] 'f' converts the size batch to a number at "
                            "test_size_guards.cpp:" +
                                std::to_string(line),
                            "11 with batch = 11 and 13 with batch = 13", "keep it a kiln::SymInt"});
  e = test::error_of([&] {
    function(
        [&](const Tensors& in) {
          line = __LINE__ + 1;
          return Tensors{div(in[0], static_cast<double>(in[0].size(0) * 2))};
        },
        {TensorSpec({"batch", 3})}, quiet("g"));
  });
  test::expect_contains(e, {"'g' converts the size batch * 2 to a number at "
                            "test_size_guards.cpp:" +
                                std::to_string(line),
                            "22 with batch = 11 and 26 with batch = 13"});
  e = test::error_of([&] {
    function(
        [&](const Tensors& in) {
          line = __LINE__ + 1;
          return Tensors{mul(in[0], tensor({static_cast<double>(in[0].size(0)), 1.0}))};
        },
        {TensorSpec({"batch", 2})}, quiet("h"));
  });
  test::expect_contains(e, {"'h' converts the size batch to a number at test_size_guards.cpp:" +
                            std::to_string(line)});
}

// A conversion whose number is the same at both probes (the parity of the batch) is kept as a
// guard, and a call with the other parity retraces; the reason says it was a conversion.
TEST(SizeGuards, AConversionWithTheSameNumberAtBothProbesIsAGuard) {
  int line = 0;
  auto program = [&](const Tensor& x) {
    line = __LINE__ + 1;
    const int64_t parity = x.size(0) % 2;
    return add(x, static_cast<double>(parity));
  };
  std::vector<std::string> log;
  FunctionOptions o = quiet("parity", RetracePolicy::kLog);
  o.logger = [&](const std::string& s) { log.push_back(s); };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch"})}, o);
  for (int64_t batch : {3, 9, 4, 4, 5}) {
    const Tensor x = randn({batch});
    test::expect_bit_identical(f({x})[0], program(x));
  }
  EXPECT_EQ(f.stats().traces, 2);
  ASSERT_EQ(log.size(), 1u);
  test::expect_contains(
      log[0], {"batch % 2 == 1 was assumed at test_size_guards.cpp:" + std::to_string(line),
               "where the size is converted to a number", "batch = 4"});
  // The document keeps which guard a conversion made.
  const nlohmann::json doc = to_json(*f.graphs()[0]);
  bool converted = false;
  for (const auto& g : doc["guards"]) converted = converted || g.value("converted", false);
  EXPECT_TRUE(converted);
  EXPECT_EQ(to_json(from_json(doc, {})), doc);
  nlohmann::json bad = doc;
  for (auto& g : bad["guards"]) g["converted"] = "yes";
  test::expect_error([&] { from_json(bad, {}); }, {".converted is not a boolean"});
}

// The idioms that keep sizes as SymInts convert nothing and leave no guard.
TEST(SizeGuards, SizeApisLeaveNoGuards) {
  Function f = function(
      [](const Tensors& in) {
        const Tensor& x = in[0];
        Tensor y = x.view({x.size(0), -1});
        y = add(y, full({x.size(0), 1}, 0.5));
        y = div(y, x.size(0));
        y = narrow(y, 0, 0, x.size(0) - 1);
        return Tensors{add(y, reshape(arange(x.size(1) * 4), {1, -1}))};
      },
      {TensorSpec({"batch", 3, 4})}, quiet("apis"));
  EXPECT_TRUE(f.graphs()[0]->guards.empty());
  for (int64_t batch : {2, 7}) {
    const Tensor x = randn({batch, 3, 4});
    const Tensor want =
        add(narrow(div(add(x.view({batch, -1}), 0.5), static_cast<double>(batch)), 0, 0, batch - 1),
            reshape(arange(12.0), {1, -1}));
    test::expect_bit_identical(f({x})[0], want);
  }
}

// A branch's comparison of an operand's size is a guard of the function around it (Note [size
// guards]); a call that breaks it retraces like one made outside the branch.
TEST(SizeGuards, AGuardInsideACondBranchIsAGuardOfTheFunction) {
  int line = 0;
  auto then_fn = [&](const Tensors& ops) {
    line = __LINE__ + 1;
    return Tensors{ops[0].size(0) == 1 ? mul(ops[0], 3.0) : neg(ops[0])};
  };
  auto else_fn = [](const Tensors& ops) { return Tensors{ops[0]}; };
  auto program = [&](const Tensor& x) {
    return kiln::cond(gt(sum(x), -1e9), then_fn, else_fn, {x})[0];
  };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch", 2})}, quiet("branchy"));
  ASSERT_EQ(f.graphs()[0]->guards.size(), 1u);
  EXPECT_EQ(f.graphs()[0]->guards[0].where, "test_size_guards.cpp:" + std::to_string(line));
  for (int64_t batch : {4, 1, 3}) {
    const Tensor x = randn({batch, 2});
    test::expect_bit_identical(f({x})[0], program(x));
  }
  EXPECT_EQ(f.stats().traces, 2);
  test::expect_contains(f.stats().retrace_reasons.at(0), {"batch != 1 was assumed at"});
}

// Comparing a size computed inside the branch cannot be checked before a call: an error naming it.
TEST(SizeGuards, ABranchComparingItsOwnValuesSizeIsAnError) {
  auto then_fn = [](const Tensors& ops) {
    const Tensor h = cat({ops[0], ops[0]}, 0);
    return Tensors{narrow(h.size(0) > 3 ? h : neg(h), 0, 0, 1)};
  };
  auto else_fn = [](const Tensors& ops) { return Tensors{narrow(ops[0], 0, 0, 1)}; };
  test::expect_error(
      [&] {
        function(
            [&](const Tensors& in) {
              return kiln::cond(gt(sum(in[0]), 0.0), then_fn, else_fn, {in[0]});
            },
            {TensorSpec({"batch", 2})}, quiet("inner"));
      },
      {"[then]", "compares size(%", "a size of a value computed inside it"});
}

// The pieces of chunk are cut at SymInt offsets; their number is a guard.
TEST(SizeGuards, ChunkAlongTheBatchServesEveryBatchWithTheSameNumberOfPieces) {
  auto program = [](const Tensor& x) {
    Tensors parts = chunk(x, 3, 0);
    Tensor acc = sum(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i)
      acc = add(acc, mul(sum(parts[i]), static_cast<double>(i + 1)));
    return acc;
  };
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec({"batch", 2})}, quiet("chunks"));
  for (int64_t batch : {11, 7, 20, 2, 0}) {
    const Tensor x = randn({batch, 2});
    test::expect_bit_identical(f({x})[0], program(x));
  }
  // 7 and 20 cut 3 pieces as 11 does; 2 cuts 2 and 0 cuts 3 empty ones: two retraces.
  EXPECT_EQ(f.stats().traces, 3);
}

}  // namespace
}  // namespace kiln::graph
