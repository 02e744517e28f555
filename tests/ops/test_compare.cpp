#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/autograd/gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/ops/sample_data.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

using Bools = std::vector<bool>;

Bools bools(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::Bool);
  return t.to_vector<bool>();
}

Tensor f64(std::vector<double> v, Shape shape) {
  return tensor<double>(v, shape);
}

TEST(Compare, TensorTensorWithBroadcasting) {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f64({2, 2, 7}, {3});
  EXPECT_EQ(eq(a, b).shape(), (Shape{2, 3}));
  EXPECT_EQ(bools(eq(a, b)), (Bools{false, true, false, false, false, false}));
  EXPECT_EQ(bools(ne(a, b)), (Bools{true, false, true, true, true, true}));
  EXPECT_EQ(bools(lt(a, b)), (Bools{true, false, true, false, false, true}));
  EXPECT_EQ(bools(le(a, b)), (Bools{true, true, true, false, false, true}));
  EXPECT_EQ(bools(gt(a, b)), (Bools{false, false, false, true, true, false}));
  EXPECT_EQ(bools(ge(a, b)), (Bools{false, true, false, true, true, false}));
  // Both operands broadcast: [2, 1] against [3].
  Tensor col = f64({1, 5}, {2, 1});
  EXPECT_EQ(bools(lt(col, f64({0, 2, 6}, {3}))), (Bools{false, true, true, false, false, true}));
}

TEST(Compare, TensorScalar) {
  Tensor a = f64({-1, 0.25, 3}, {3});
  EXPECT_EQ(bools(eq(a, 0.25)), (Bools{false, true, false}));
  EXPECT_EQ(bools(ne(a, 0.25)), (Bools{true, false, true}));
  EXPECT_EQ(bools(lt(a, 0.25)), (Bools{true, false, false}));
  EXPECT_EQ(bools(le(a, 0.25)), (Bools{true, true, false}));
  EXPECT_EQ(bools(gt(a, 0.25)), (Bools{false, false, true}));
  EXPECT_EQ(bools(ge(a, 0.25)), (Bools{false, true, true}));
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor n = f64({nan}, {1});
  EXPECT_EQ(bools(eq(n, n)), (Bools{false}));
  EXPECT_EQ(bools(ne(n, n)), (Bools{true}));
}

TEST(Compare, PromotesOperandsBeforeComparing) {
  // int64 vs 2.5 compares in float32 (2 < 2.5), not after truncating 2.5 to 2.
  Tensor i = tensor<int64_t>({1, 2, 3}, Shape{3});
  EXPECT_EQ(bools(lt(i, 2.5)), (Bools{true, true, false}));
  EXPECT_EQ(bools(eq(i, 2.0)), (Bools{false, true, false}));
  // float32 tensor vs float64 values: 0.1 is rounded to float32 first, as in PyTorch.
  Tensor f = tensor<double>({0.1}, Shape{1}, TensorOptions{DType::Float32});
  EXPECT_EQ(bools(eq(f, 0.1)), (Bools{true}));
  // Mixed dtypes of two tensors: uint8 200 vs int8 -1.
  Tensor u = tensor<uint8_t>({200}, Shape{1});
  Tensor s = tensor<int64_t>({-1}, Shape{1}, TensorOptions{DType::Int8});
  EXPECT_EQ(bools(gt(u, s)), (Bools{true}));
  Tensor h = tensor<double>({1.5}, Shape{1}, TensorOptions{DType::Float16});
  EXPECT_EQ(bools(gt(h, i)), (Bools{true, false, false}));
}

TEST(Compare, Logical) {
  Tensor a = f64({0, 1.5, 0, -2}, {4});
  Tensor b = tensor<bool>({false, true, true, false}, Shape{4});
  EXPECT_EQ(bools(logical_and(a, b)), (Bools{false, true, false, false}));
  EXPECT_EQ(bools(logical_or(a, b)), (Bools{false, true, true, true}));
  EXPECT_EQ(bools(logical_xor(a, b)), (Bools{false, false, true, true}));
  EXPECT_EQ(bools(logical_not(a)), (Bools{true, false, true, false}));
  EXPECT_EQ(bools(logical_not(tensor<int64_t>({0, 7}, Shape{2}))), (Bools{true, false}));
  double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(bools(logical_not(f64({nan}, {1}))), (Bools{false}));  // NaN is truthy
  Tensor col = tensor<int32_t>({0, 3}, Shape{2, 1});
  EXPECT_EQ(logical_and(col, b).shape(), (Shape{2, 4}));
  EXPECT_EQ(bools(logical_and(col, b)),
            (Bools{false, false, false, false, false, true, true, false}));
}

TEST(Compare, StridedInputs) {
  Tensor base = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = base.t();  // [[1, 4], [2, 5], [3, 6]]
  ASSERT_FALSE(t.is_contiguous());
  EXPECT_EQ(bools(gt(t, 2.5)), (Bools{false, true, false, true, true, true}));
  Tensor stepped = make_view(base, {3}, {2}, 0);  // 1, 3, 5
  EXPECT_EQ(bools(eq(stepped, f64({1, 2, 5}, {3}))), (Bools{true, false, true}));
  EXPECT_EQ(bools(logical_not(make_view(base, {2}, {3}, 1))), (Bools{false, false}));
}

TEST(Where, ValuesAndBroadcasting) {
  Tensor cond = tensor<bool>({true, false, true}, Shape{3});
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f64({-1, -2}, {2, 1});
  Tensor y = where(cond, a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, -1, 3, 4, -2, 6}));
  EXPECT_EQ(where(cond, a, 0.5).to_vector<double>(), (std::vector<double>{1, 0.5, 3, 4, 0.5, 6}));
  EXPECT_EQ(where(cond, -7.0, a).to_vector<double>(), (std::vector<double>{-7, 2, -7, -7, 5, -7}));
  // All three broadcast: [2, 1, 1], [3], [1, 2, 1].
  Tensor c3 = tensor<bool>({true, false}, Shape{2, 1, 1});
  Tensor y3 = where(c3, f64({1, 2, 3}, {3}), f64({10, 20}, {1, 2, 1}));
  EXPECT_EQ(y3.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y3.to_vector<double>(),
            (std::vector<double>{1, 2, 3, 1, 2, 3, 10, 10, 10, 20, 20, 20}));
  Tensor cs = make_view(tensor<bool>({true, false, false, true}, Shape{4}), {2}, {3}, 0);
  EXPECT_EQ(where(cs, f64({1, 2}, {2}), 0.0).to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST(Where, ResultDtype) {
  Tensor cond = tensor<bool>({true, false}, Shape{2});
  Tensor i = tensor<int64_t>({1, 2}, Shape{2});
  Tensor f = tensor<double>({0.5, 1.5}, Shape{2}, TensorOptions{DType::Float32});
  Tensor y = where(cond, i, f);
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1.0, 1.5}));
  EXPECT_EQ(where(cond, i, 0.5).dtype(), DType::Float32);
  Tensor wi = where(cond, i, 3.0);
  EXPECT_EQ(wi.dtype(), DType::Int64);
  EXPECT_EQ(wi.to_vector<int64_t>(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(where(cond, f, 2.0).dtype(), DType::Float32);
}

TEST(Where, GradientsSumOverBroadcastDims) {
  Tensor cond = tensor<bool>({true, false, true}, Shape{3});
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f64({-1, -2}, {2, 1});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  std::vector<Tensor> g = grad({where(cond, a, b).sum()}, {a, b});
  EXPECT_EQ(g[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{1, 0, 1, 1, 0, 1}));
  EXPECT_EQ(g[1].shape(), (Shape{2, 1}));
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{1, 1}));
  // Mixed floating dtypes: each gradient comes back in its input's dtype.
  Tensor a32 = tensor<double>({1, 2, 3}, Shape{3}, TensorOptions{DType::Float32});
  a32.set_requires_grad(true);
  Tensor ga = grad({where(cond, a32, b).sum()}, {a32})[0];
  EXPECT_EQ(ga.dtype(), DType::Float32);
  EXPECT_EQ(ga.to_vector<double>(), (std::vector<double>{2, 0, 2}));
  auto f = [cond](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{where(cond, mul(in[0], in[0]), in[1])};
  };
  EXPECT_TRUE(gradgradcheck(f, {sample_tensor({2, 3}, 1), sample_tensor({2, 1}, 2)}));
}

TEST(Compare, NotRecordedOnTheTape) {
  Tensor a = f64({1, 2}, {2});
  a.set_requires_grad(true);
  EXPECT_FALSE(gt(a, 1.5).requires_grad());
  EXPECT_FALSE(logical_not(a).requires_grad());
  EXPECT_TRUE(where(gt(a, 1.5), a, 0.0).requires_grad());
}

TEST(Compare, Errors) {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f64({1, 2}, {2});
  expect_error([&] { lt(a, b); }, {"[lt]", "[2, 3]", "[2]", "test_compare.cpp"});
  expect_error([&] { logical_and(a, b); }, {"[logical_and]", "[2, 3]", "[2]", "test_compare.cpp"});
  Tensor cond = tensor<int64_t>({1, 0, 1}, Shape{3});
  expect_error([&] { where(cond, a, 0.0); }, {"[where]", "bool", "int64[3]", "test_compare.cpp"});
  Tensor good = tensor<bool>({true, false}, Shape{2});
  expect_error([&] { where(good, a, 0.0); }, {"[where]", "[2]", "[2, 3]", "test_compare.cpp"});
}

TEST(Compare, MetaInference) {
  Tensor m = empty({4, 1}, {DType::Float32, kMeta});
  Tensor y = ge(m, empty({3}, {DType::Int64, kMeta}));
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(y.dtype(), DType::Bool);
  Tensor w = where(empty({3}, {DType::Bool, kMeta}), m, 1.0);
  EXPECT_EQ(w.shape(), (Shape{4, 3}));
  EXPECT_EQ(w.dtype(), DType::Float32);
}

}  // namespace
}  // namespace kiln
