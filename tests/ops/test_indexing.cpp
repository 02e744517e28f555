#include <gtest/gtest.h>

#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::iota;

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

Tensor idx(std::vector<int64_t> v, Shape shape) {
  return tensor<int64_t>(v, shape);
}
Tensor idx(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return tensor<int64_t>(v, Shape{n});
}
Tensor mask(std::vector<bool> v, Shape shape) {
  return tensor<bool>(v, shape);
}

TEST(Indexing, Gather) {
  Tensor x = iota({3, 4});  // rows [0..3], [4..7], [8..11]
  Tensor g1 = gather(x, 1, idx({0, 3, 3, 1, 2, 0}, {3, 2}));
  EXPECT_EQ(g1.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(g1), (std::vector<double>{0, 3, 7, 5, 10, 8}));
  Tensor g0 = gather(x, -2, idx({2, 0, 1}, {1, 3}));
  EXPECT_EQ(values(g0), (std::vector<double>{8, 1, 6}));
  // Strided x: gather from x^T.
  Tensor xt = transpose(x, 0, 1);  // [4, 3]
  EXPECT_EQ(values(gather(xt, 1, idx({2, 0}, {2, 1}))), (std::vector<double>{8, 1}));
  EXPECT_EQ(gather(iota({3}, 0, DType::Int64), 0, idx({2, 2})).dtype(), DType::Int64);
}

TEST(Indexing, GatherErrors) {
  Tensor x = iota({3, 4});
  expect_error(
      [&] {
        gather(x, 1, idx({0, 7}, {1, 2}));
      },
      {"[gather]", "[0, 4)", "got 7", "float32[3, 4] on cpu", "test_indexing.cpp"});
  expect_error(
      [&] {
        gather(x, 1, idx({-1}, {1, 1}));
      },
      {"[gather]", "got -1", "test_indexing.cpp"});
  expect_error(
      [&] {
        gather(x, 1, tensor<int32_t>({0}, Shape{1, 1}));
      },
      {"[gather]", "int64", "int32[1, 1]", "test_indexing.cpp"});
  expect_error(
      [&] {
        gather(x, 1, idx({0, 1}));
      },
      {"[gather]", "rank", "int64[2] on cpu", "test_indexing.cpp"});
  expect_error(
      [&] {
        gather(x, 1, idx({0, 0, 0, 0, 0, 0, 0, 0}, {4, 2}));
      },
      {"[gather]", "int64[4, 2]", "float32[3, 4]", "test_indexing.cpp"});
  expect_error([&] { gather(x, 2, idx({0}, {1, 1})); }, {"[gather]", "dim", "test_indexing.cpp"});
}

TEST(Indexing, GatherGradientScatters) {
  Tensor x = iota({2, 3}, 0, DType::Float64).detach().set_requires_grad(true);
  Tensor index = idx({2, 2, 0, 1, 1, 1}, {2, 3});
  Tensor g = grad({sum(gather(x, 1, index))}, {x})[0];
  EXPECT_EQ(values(g), (std::vector<double>{1, 0, 2, 0, 3, 0}));
}

TEST(Indexing, ScatterAdd) {
  Tensor x = zeros({3, 2});
  Tensor index = idx({0, 1, 0, 0, 2, 1}, {3, 2});
  Tensor src = iota({3, 2}, 1);  // 1..6
  Tensor out = scatter_add(x, 0, index, src);
  // column 0: rows 0,0,2 get 1,3,5; column 1: rows 1,0,1 get 2,4,6
  EXPECT_EQ(values(out), (std::vector<double>{4, 4, 0, 8, 5, 0}));
  EXPECT_EQ(values(x), std::vector<double>(6, 0.0));  // out of place
  // An index smaller than src uses only its leading part.
  Tensor small = scatter_add(zeros({2, 3}), 1, idx({2, 2}, {1, 2}), iota({2, 3}, 1));
  EXPECT_EQ(values(small), (std::vector<double>{0, 0, 3, 0, 0, 0}));
}

TEST(Indexing, ScatterAddGradients) {
  Tensor x = zeros({2, 3}, {DType::Float64}).set_requires_grad(true);
  Tensor src = iota({2, 3}, 0, DType::Float64).detach().set_requires_grad(true);
  Tensor index = idx({2, 0}, {1, 2});  // smaller than src
  Tensor w = iota({2, 3}, 10, DType::Float64);
  Tensor out = scatter_add(x, 1, index, src);
  std::vector<Tensor> grads = grad({sum(out * w)}, {x, src});
  EXPECT_EQ(values(grads[0]), values(w));
  EXPECT_EQ(grads[1].shape(), (Shape{2, 3}));
  EXPECT_EQ(values(grads[1]), (std::vector<double>{12, 10, 0, 0, 0, 0}));
}

TEST(Indexing, ScatterAddErrors) {
  Tensor x = zeros({2, 3});
  expect_error(
      [&] {
        scatter_add(x, 1, idx({3}, {1, 1}), ones({1, 1}));
      },
      {"[scatter_add]", "[0, 3)", "got 3", "test_indexing.cpp"});
  expect_error(
      [&] {
        scatter_add(x, 1, idx({0}, {1, 1}), ones({1, 1}, {DType::Float64}));
      },
      {"[scatter_add]", "dtype", "float64[1, 1]", "test_indexing.cpp"});
  expect_error(
      [&] {
        scatter_add(x, 1, idx({0, 0}, {1, 2}), ones({1, 1}));
      },
      {"[scatter_add]", "src", "int64[1, 2]", "float32[1, 1]", "test_indexing.cpp"});
}

TEST(Indexing, IndexSelect) {
  Tensor x = iota({3, 4});
  Tensor rows = index_select(x, 0, idx({2, 0, 2}));
  EXPECT_EQ(rows.shape(), (Shape{3, 4}));
  EXPECT_EQ(values(rows), (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  Tensor cols = index_select(x, -1, idx({3, 1}));
  EXPECT_EQ(values(cols), (std::vector<double>{3, 1, 7, 5, 11, 9}));
  Tensor strided = index_select(transpose(x, 0, 1), 1, idx({1}));  // column 1 of x^T = row 1
  EXPECT_EQ(values(strided), (std::vector<double>{4, 5, 6, 7}));
  EXPECT_EQ(values(index_select(iota({5}, 0, DType::Int32), 0, idx({4, 4, 0}))),
            (std::vector<double>{4, 4, 0}));
  EXPECT_EQ(index_select(x, 1, idx({})).shape(), (Shape{3, 0}));
}

TEST(Indexing, IndexSelectErrorsNeverCrash) {
  Tensor x = iota({5, 3});
  expect_error(
      [&] {
        index_select(x, 0, idx({1, 7}));
      },
      {"[index_select]", "got 7", "[0, 5)", "float32[5, 3] on cpu", "test_indexing.cpp"});
  expect_error([&] { index_select(x, 0, idx({-1})); }, {"[index_select]", "got -1"});
  expect_error(
      [&] {
        index_select(x, 0, idx({0, 1}, {1, 2}));
      },
      {"[index_select]", "1-D", "int64[1, 2]", "test_indexing.cpp"});
  expect_error([&] { index_select(x, 0, tensor<int32_t>({0}, Shape{1})); },
               {"[index_select]", "int64", "int32[1]", "test_indexing.cpp"});
}

TEST(Indexing, IndexSelectGradientAccumulatesDuplicates) {
  Tensor x = iota({3, 2}, 0, DType::Float64).detach().set_requires_grad(true);
  Tensor out = index_select(x, 0, idx({2, 0, 2}));
  Tensor g = grad({out}, {x}, {iota({3, 2}, 1, DType::Float64)})[0];
  EXPECT_EQ(values(g), (std::vector<double>{3, 4, 0, 0, 6, 8}));
}

TEST(Indexing, MaskedFill) {
  Tensor x = iota({2, 3});
  Tensor m = mask({true, false, false, true, true, false}, {2, 3});
  EXPECT_EQ(values(masked_fill(x, m, -1.5)), (std::vector<double>{-1.5, 1, 2, -1.5, -1.5, 5}));
  Tensor row = mask({false, true, false}, {3});
  EXPECT_EQ(values(masked_fill(x, row, 9)), (std::vector<double>{0, 9, 2, 3, 9, 5}));
  Tensor xi = iota({2, 3}, 0, DType::Int64);
  Tensor filled = masked_fill(xi, row, 7);
  EXPECT_EQ(filled.dtype(), DType::Int64);
  EXPECT_EQ(values(filled), (std::vector<double>{0, 7, 2, 3, 7, 5}));
  // x broadcasts against the mask, as torch.masked_fill does.
  EXPECT_EQ(masked_fill(iota({2, 1}), row, 0).shape(), (Shape{2, 3}));
  expect_error([&] { masked_fill(x, iota({3}), 0); },
               {"[masked_fill]", "bool", "float32[3]", "test_indexing.cpp"});
  expect_error(
      [&] {
        masked_fill(x, mask({true, false}, {2}), 0);
      },
      {"[masked_fill]", "[2, 3]", "[2]", "test_indexing.cpp"});
}

TEST(Indexing, MaskedFillGradient) {
  Tensor x = iota({2, 1}, 0, DType::Float64).detach().set_requires_grad(true);
  Tensor m = mask({false, true, false}, {3});
  Tensor g = grad({sum(masked_fill(x, m, 5.0))}, {x})[0];
  EXPECT_EQ(g.shape(), (Shape{2, 1}));
  EXPECT_EQ(values(g), (std::vector<double>{2, 2}));
}

TEST(Indexing, OneHot) {
  Tensor labels = idx({0, 2, 1}, {3});
  Tensor oh = one_hot(labels, 4);
  EXPECT_EQ(oh.shape(), (Shape{3, 4}));
  EXPECT_EQ(oh.dtype(), DType::Int64);
  EXPECT_EQ(values(oh), (std::vector<double>{1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0}));
  Tensor inferred = one_hot(idx({1, 3}, {2, 1}));
  EXPECT_EQ(inferred.shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(values(inferred), (std::vector<double>{0, 1, 0, 0, 0, 0, 0, 1}));
  EXPECT_FALSE(one_hot(labels, 3).requires_grad());
}

TEST(Indexing, OneHotErrors) {
  expect_error(
      [] {
        one_hot(idx({0, -1}), 3);
      },
      {"[one_hot]", "got -1", "int64[2] on cpu", "test_indexing.cpp"});
  expect_error(
      [] {
        one_hot(idx({0, 3}), 3);
      },
      {"[one_hot]", "[0, 3)", "got 3", "test_indexing.cpp"});
  expect_error([] { one_hot(idx({}), -1); }, {"[one_hot]", "empty", "test_indexing.cpp"});
  expect_error([] { one_hot(iota({2}), 3); },
               {"[one_hot]", "int64", "float32[2]", "test_indexing.cpp"});
  expect_error(
      [] {
        one_hot(empty({2}, {DType::Int64, kMeta}), -1);
      },
      {"[one_hot]", "meta", "test_indexing.cpp"});
}

TEST(Indexing, MetaShapes) {
  Tensor x = empty({3, 4}, {DType::Float32, kMeta});
  Tensor i = empty({2, 4}, {DType::Int64, kMeta});
  EXPECT_EQ(gather(x, 0, i).shape(), (Shape{2, 4}));
  EXPECT_EQ(index_select(x, 1, empty({5}, {DType::Int64, kMeta})).shape(), (Shape{3, 5}));
  EXPECT_EQ(one_hot(empty({2}, {DType::Int64, kMeta}), 6).shape(), (Shape{2, 6}));
}

}  // namespace
}  // namespace kiln
