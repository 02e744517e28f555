// The shape-taking APIs with sizes read from a traced tensor (Note [size lists] in
// kiln/core/size_list.h): `x.view({x.size(0), -1})`, `x / x.size(0)`, a `full` sized from the
// batch — PyTorch's idioms — trace once and serve every batch size, bit-identical to eager.
#include <gtest/gtest.h>

#include <type_traits>

#include "kiln/graph/executor.h"
#include "kiln/graph/function.h"
#include "kiln/graph/serialize.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Tensors = std::vector<Tensor>;

// Traces `program` once with a symbolic batch and checks it against eager for several batches.
template <class F>
Function check_one_trace(F program, const Shape& rest, const std::string& name,
                         std::vector<int64_t> batches = {1, 2, 7, 64}) {
  SymShape shape{Dim{0, "batch"}};
  for (int64_t d : rest) shape.push_back(Dim{d, ""});
  Function f = function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                        {TensorSpec(shape, DType::Float32, "x")}, {.name = name});
  for (int64_t batch : batches) {
    Shape s{batch};
    s.insert(s.end(), rest.begin(), rest.end());
    Tensor x = randn(s);
    SCOPED_TRACE(name + " at batch " + std::to_string(batch));
    test::expect_bit_identical(f({x})[0], program(x));
  }
  EXPECT_EQ(f.stats().traces, 1) << name;
  return f;
}

TEST(SizeApis, SizeIsASymIntAndAPlainNumberInEagerCode) {
  static_assert(std::is_same_v<decltype(std::declval<Tensor>().size(0)), SymInt>);
  static_assert(std::is_same_v<decltype(std::declval<Tensor>().dim_size(0)), int64_t>);
  Tensor x = randn({6, 4});
  EXPECT_FALSE(x.size(0).is_symbolic());
  const int64_t n = x.size(0) * x.size(-1);  // converts as an integer does
  EXPECT_EQ(n, 24);
  EXPECT_EQ(x.dim_size(-1), 4);
  EXPECT_EQ(hints_of(x.sizes()), (Shape{6, 4}));
  EXPECT_EQ(fmt::format("{} x {}", x.size(0), x.size(1)), "6 x 4");  // sizes print as numbers
  EXPECT_EQ(x.view({x.size(0), -1, 2}).shape(), (Shape{6, 2, 2}));
  // The Shape forms are unchanged.
  const Shape s{3, 8};
  EXPECT_EQ(x.reshape(s).shape(), s);
  EXPECT_EQ(zeros({2, 3}).shape(), (Shape{2, 3}));
}

TEST(SizeApis, ViewAndReshapeFromTheBatchSize) {
  auto program = [](const Tensor& x) {
    Tensor flat = x.view({x.size(0), -1});              // [batch, 12]
    Tensor pairs = flat.reshape({x.size(0) * 2, 6});    // [2*batch, 6]
    return reshape(pairs, {-1, x.size(1), x.size(2)});  // back to [batch, 3, 4]
  };
  Function f = check_one_trace(program, {3, 4}, "views");
  test::expect_contains(to_text(*f.graphs()[0]), {"view(%0) {shape=[size(%0, 0),-1]}",
                                                  "reshape(%1) {shape=[size(%0, 0) * 2,6]}",
                                                  "reshape(%2) {shape=[-1,3,4]}"});
}

TEST(SizeApis, DividingByTheBatchSize) {
  auto program = [](const Tensor& x) {
    Tensor total = sum(x);
    return add(div(total, x.size(0)), total / (x.size(0) * x.size(1)));
  };
  Function f = check_one_trace(program, {5}, "per_sample");
  test::expect_contains(to_text(*f.graphs()[0]), {"value=size(%0, 0)"});
  // The other operators and orders.
  auto more = [](const Tensor& x) {
    const SymInt n = x.size(0);
    return sub(add(mul(x, n) + n, n * x - x * n), n / (abs(x) + 1.0)) - n;
  };
  check_one_trace(more, {3}, "operands");
}

TEST(SizeApis, FactoriesSizedFromTheBatch) {
  auto program = [](const Tensor& x) {
    const SymInt n = x.size(0);
    Tensor z = zeros({n, 1}), o = ones({n, x.size(1)}), h = full({n, 1}, 0.5);
    Tensor idx = to_dtype(reshape(arange(n), {n, 1}), DType::Float32);
    return add(add(mul(x, o), add(z, h)), idx);
  };
  check_one_trace(program, {4}, "factories");
}

TEST(SizeApis, ExpandNarrowSliceAndUnflatten) {
  auto program = [](const Tensor& x) {
    const SymInt n = x.size(0);
    Tensor bias = expand(reshape(sum(x, {0}), {1, 6}), {n, 6});
    Tensor shifted = cat({narrow(x, 0, 1, n - 1), narrow(x, 0, 0, 1)}, 0);  // roll by one
    Tensor head = slice(x, 0, std::nullopt, n - 1);
    Tensor tail = slice(x, 0, 1, n);
    Tensor pieces = unflatten(add(add(bias, shifted), x), 1, {2, x.size(1) / 2});
    return add(sum(pieces, {2}), sum(mul(head, tail)));
  };
  check_one_trace(program, {6}, "windows", {2, 3, 9, 64});
}

// Random factories sized from the batch draw fresh numbers of the call's size.
TEST(SizeApis, RandomFactoriesOfTheCallsSize) {
  Function f = function(
      [](const Tensors& in) {
        const Tensor& x = in[0];
        return Tensors{add(x, randn({x.size(0), x.size(1)})), rand({x.size(0)})};
      },
      {TensorSpec({"batch", 3})}, {.name = "noise"});
  for (int64_t batch : {1, 5, 40}) {
    Tensors out = f({zeros({batch, 3})});
    EXPECT_EQ(out[0].shape(), (Shape{batch, 3}));
    EXPECT_EQ(out[1].shape(), (Shape{batch}));
  }
  EXPECT_EQ(f.stats().traces, 1);
  Tensors a = f({zeros({4, 3})}), b = f({zeros({4, 3})});
  EXPECT_GT(max(abs(sub(a[0], b[0]))).item(), 0.0) << "each call draws fresh numbers";
}

// A size converted to a plain number before it reaches an API (a Shape built from it) is baked:
// the two-probe diff still refuses it and names the op and the line.
TEST(SizeApis, ASizeThatBecameANumberIsStillRefused) {
  int line = 0;
  auto program = [&](const Tensor& x) {
    line = __LINE__ + 1;
    return reshape(x, Shape{x.size(0) * 2, -1});
  };
  program(randn({2, 4}));  // eager: fine (and sets `line`)
  test::expect_error(
      [&] {
        function([&](const Tensors& in) { return Tensors{program(in[0])}; },
                 {TensorSpec({"batch", 4})}, {.name = "baked"});
      },
      {"reshape", "test_size_apis.cpp:" + std::to_string(line)});
}

// The graph document keeps the expressions: a saved and loaded graph serves every batch.
TEST(SizeApis, TheDocumentServesEveryBatch) {
  auto program = [](const Tensor& x) { return div(x.view({x.size(0), -1}), x.size(0)); };
  Function f = check_one_trace(program, {2, 3}, "saved", {3});
  const Graph loaded = from_json(to_json(*f.graphs()[0]), {});
  for (int64_t batch : {1, 10}) {
    Tensor x = randn({batch, 2, 3});
    test::expect_bit_identical(run(loaded, {x})[0], program(x));
  }
}

}  // namespace
}  // namespace kiln::graph
