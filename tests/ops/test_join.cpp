#include <gtest/gtest.h>

#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/join.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::iota;

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

TEST(Join, CatThreeInputsNegativeDim) {
  Tensor a = iota({2, 2}), b = iota({2, 1}, 10), c = iota({2, 3}, 20);
  Tensor out = cat({a, b, c}, -1);
  EXPECT_EQ(out.shape(), (Shape{2, 6}));
  EXPECT_EQ(values(out), (std::vector<double>{0, 1, 10, 20, 21, 22, 2, 3, 11, 23, 24, 25}));
  Tensor rows = cat({a, iota({1, 2}, 7)}, 0);
  EXPECT_EQ(values(rows), (std::vector<double>{0, 1, 2, 3, 7, 8}));
}

TEST(Join, CatPromotesAndReadsStridedInputs) {
  Tensor i = iota({2, 2}, 0, DType::Int32);
  Tensor f = iota({2, 2}, 4, DType::Float64);
  Tensor out = cat({i, f}, 0);
  EXPECT_EQ(out.dtype(), DType::Float64);
  EXPECT_EQ(values(out), (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(cat({i, iota({1, 2}, 0, DType::Int64)}, 0).dtype(), DType::Int64);
  Tensor t = transpose(iota({3, 2}), 0, 1);  // [[0, 2, 4], [1, 3, 5]]
  ASSERT_FALSE(t.is_contiguous());
  EXPECT_EQ(values(cat({t, t}, 1)), (std::vector<double>{0, 2, 4, 0, 2, 4, 1, 3, 5, 1, 3, 5}));
}

TEST(Join, CatSkipsLegacyEmptyTensors) {
  Tensor empty1d = zeros({0});
  Tensor out = cat({empty1d, iota({2, 2}), empty1d}, 1);
  EXPECT_EQ(out.shape(), (Shape{2, 2}));
  EXPECT_EQ(cat({empty1d, empty1d}).shape(), (Shape{0}));
}

TEST(Join, CatGradientSlicesAndConverts) {
  Tensor a = iota({2, 2}, 0, DType::Float64).detach().set_requires_grad(true);
  Tensor b = iota({2, 3}, 0, DType::Float32).detach().set_requires_grad(true);
  Tensor out = cat({a, b}, 1);
  ASSERT_EQ(out.dtype(), DType::Float64);
  Tensor g = iota({2, 5}, 100, DType::Float64);
  std::vector<Tensor> grads = grad({out}, {a, b}, {g});
  EXPECT_EQ(values(grads[0]), (std::vector<double>{100, 101, 105, 106}));
  EXPECT_EQ(grads[1].dtype(), DType::Float32);
  EXPECT_EQ(values(grads[1]), (std::vector<double>{102, 103, 104, 107, 108, 109}));
}

TEST(Join, CatErrors) {
  expect_error(
      [] {
        cat({zeros({2, 3}), zeros({2, 3}), zeros({4, 5})}, 1);
      },
      {"[cat]", "tensor 2", "tensor 0", "float32[2, 3] on cpu", "float32[4, 5] on cpu",
       "test_join.cpp"});
  expect_error(
      [] {
        cat({zeros({2, 3}), zeros({2, 3, 1})});
      },
      {"[cat]", "rank", "float32[2, 3, 1]", "test_join.cpp"});
  expect_error(
      [] {
        cat({scalar_tensor(1.0), scalar_tensor(2.0)});
      },
      {"[cat]", "zero-dimensional", "test_join.cpp"});
  expect_error([] { cat({}); }, {"[cat]", "empty", "test_join.cpp"});
  expect_error([] { cat({zeros({2, 3})}, 2); }, {"[cat]", "dim", "test_join.cpp"});
}

TEST(Join, Stack) {
  Tensor a = iota({2, 3}), b = iota({2, 3}, 10);
  Tensor s0 = stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(s0), (std::vector<double>{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}));
  Tensor s_last = stack({a, b}, -1);
  EXPECT_EQ(s_last.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values(s_last), (std::vector<double>{0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}));
  EXPECT_EQ(stack({scalar_tensor(1.0), scalar_tensor(2.0)}).shape(), (Shape{2}));
  expect_error(
      [&] {
        stack({a, iota({3, 2})});
      },
      {"[stack]", "float32[2, 3] on cpu", "float32[3, 2] on cpu", "tensor 1", "test_join.cpp"});
  expect_error([] { stack({}); }, {"[stack]", "empty", "test_join.cpp"});
}

TEST(Join, SplitBySizeGivesViews) {
  Tensor x = iota({2, 5});
  std::vector<Tensor> parts = split(x, 2, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(parts[2].shape(), (Shape{2, 1}));
  EXPECT_EQ(values(parts[1]), (std::vector<double>{2, 3, 7, 8}));
  EXPECT_TRUE(parts[1].storage() == x.storage());
  EXPECT_EQ(split(x, 5, -1).size(), 1u);
  EXPECT_EQ(split(x, 7, -1).size(), 1u);
  EXPECT_EQ(split(zeros({0, 2}), 3).size(), 1u);
}

TEST(Join, SplitBySizes) {
  Tensor x = iota({5, 2});
  std::vector<Tensor> parts = split(x, std::vector<int64_t>{1, 0, 4}, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].shape(), (Shape{0, 2}));
  EXPECT_EQ(values(parts[2]), (std::vector<double>{2, 3, 4, 5, 6, 7, 8, 9}));
  expect_error(
      [&] {
        split(x, std::vector<int64_t>{2, 2}, 0);
      },
      {"[split]", "add up to 5", "float32[5, 2]", "[2, 2]", "test_join.cpp"});
  expect_error([&] { split(x, 0, 0); }, {"[split]", "positive", "test_join.cpp"});
  expect_error([] { split(scalar_tensor(1.0), 1); }, {"[split]", "float32[]", "test_join.cpp"});
}

TEST(Join, ChunkFollowsTorch) {
  auto sizes = [](const std::vector<Tensor>& parts) {
    std::vector<int64_t> s;
    for (const Tensor& p : parts) s.push_back(p.size(0));
    return s;
  };
  EXPECT_EQ(sizes(chunk(iota({5}), 3)), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes(chunk(iota({6}), 4)), (std::vector<int64_t>{2, 2, 2}));  // fewer than asked
  EXPECT_EQ(sizes(chunk(iota({2}), 5)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(sizes(chunk(zeros({0}), 3)), (std::vector<int64_t>{0, 0, 0}));
  expect_error([] { chunk(iota({4}), 0); }, {"[chunk]", "positive", "test_join.cpp"});
}

TEST(Join, SplitGradientFlowsToEveryPiece) {
  Tensor x = iota({4}, 0, DType::Float64).detach().set_requires_grad(true);
  std::vector<Tensor> parts = chunk(x, 2);
  Tensor gx = grad({parts[0], parts[1]}, {x},
                   {tensor({1.0, 2.0}, {DType::Float64}), tensor({3.0, 4.0}, {DType::Float64})})[0];
  EXPECT_EQ(values(gx), (std::vector<double>{1, 2, 3, 4}));
}

TEST(Join, MetaShapes) {
  Tensor a = empty({2, 3}, {DType::Float32, kMeta}), b = empty({2, 5}, {DType::Float64, kMeta});
  Tensor c = cat({a, b}, 1);
  EXPECT_TRUE(c.is_meta());
  EXPECT_EQ(c.shape(), (Shape{2, 8}));
  EXPECT_EQ(c.dtype(), DType::Float64);
  EXPECT_EQ(stack({a, a}, 2).shape(), (Shape{2, 3, 2}));
}

}  // namespace
}  // namespace kiln
