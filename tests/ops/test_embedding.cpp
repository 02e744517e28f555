#include <gtest/gtest.h>

#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/embedding.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

Tensor idx(std::vector<int64_t> v, Shape shape) {
  return tensor<int64_t>(v, shape);
}

TEST(Embedding, PicksRows) {
  Tensor w = tensor<float>({0, 1, 10, 11, 20, 21}, Shape{3, 2});
  Tensor y = embedding(w, idx({2, 0, 2, 1}, {2, 2}));
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11}));
  Tensor s = embedding(w, idx({1}, {}));
  EXPECT_EQ(s.shape(), (Shape{2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{10, 11}));
  // Integer tables work too (no gradient), and strided weights.
  Tensor wi = tensor<int64_t>({5, 6, 7, 8}, Shape{2, 2});
  EXPECT_EQ(embedding(wi, idx({1, 1}, {2})).to_vector<int64_t>(),
            (std::vector<int64_t>{7, 8, 7, 8}));
  EXPECT_EQ(embedding(wi.t(), idx({0}, {1})).to_vector<int64_t>(), (std::vector<int64_t>{5, 7}));
  // The padding row still reads its values forward.
  EXPECT_EQ(embedding(w, idx({1}, {1}), 1).to_vector<float>(), (std::vector<float>{10, 11}));
}

TEST(Embedding, GradientAddsDuplicatesAndSkipsPadding) {
  Tensor w = zeros({4, 2}, {DType::Float64}).set_requires_grad(true);
  Tensor i = idx({3, 1, 3, 0, 1}, {5});
  Tensor g = tensor<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, Shape{5, 2});
  Tensor gw = grad({embedding(w, i)}, {w}, {g})[0];
  EXPECT_EQ(gw.to_vector<double>(), (std::vector<double>{7, 8, 12, 14, 0, 0, 6, 8}));
  Tensor gp = grad({embedding(w, i, 1)}, {w}, {g})[0];
  EXPECT_EQ(gp.to_vector<double>(), (std::vector<double>{7, 8, 0, 0, 0, 0, 6, 8}));
  Tensor gn = grad({embedding(w, i, -1)}, {w}, {g})[0];  // -1 is row 3
  EXPECT_EQ(gn.to_vector<double>(), (std::vector<double>{7, 8, 12, 14, 0, 0, 0, 0}));
  EXPECT_EQ(embedding_backward(g, i, 4, 1).to_vector<double>(), gp.to_vector<double>());
}

TEST(Embedding, Gradchecks) {
  Tensor i = idx({0, 2, 2, 1}, {2, 2});
  auto f = [i](const std::vector<Tensor>& in) { return std::vector{embedding(in[0], i)}; };
  EXPECT_TRUE(gradcheck(f, {sample_tensor({3, 2}, 1)}));
  auto b = [i](const std::vector<Tensor>& in) {
    return std::vector{embedding_backward(in[0], i, 3, 0)};
  };
  EXPECT_TRUE(gradcheck(b, {sample_tensor({2, 2, 3}, 2)}));
  EXPECT_TRUE(gradgradcheck(b, {sample_tensor({2, 2, 3}, 3)}));
  EXPECT_TRUE(gradgradcheck(f, {sample_tensor({3, 2}, 4)}));
}

TEST(Embedding, Errors) {
  expect_error(
      [] {
        embedding(zeros({5, 3}), idx({0, 7, 1}, {3}));
      },
      {"[embedding]", "got index 7", "V = 5", "float32[5, 3]", "test_embedding.cpp"});
  expect_error(
      [] {
        embedding(zeros({5, 3}), idx({-1}, {1}));
      },
      {"[embedding]", "got index -1", "V = 5", "test_embedding.cpp"});
  expect_error(
      [] {
        embedding(zeros({5, 3}), tensor<int32_t>({1, 2}));
      },
      {"[embedding]", "int64 indices", "int32[2]", "test_embedding.cpp"});
  expect_error([] { embedding(zeros({5}), idx({1}, {1})); },
               {"[embedding]", "rank 2", "float32[5]", "test_embedding.cpp"});
  expect_error(
      [] {
        embedding(zeros({5, 3}), idx({1}, {1}), 5);
      },
      {"[embedding]", "padding_idx", "got 5", "test_embedding.cpp"});
  expect_error(
      [] {
        embedding_backward(zeros({3, 2}), idx({0, 1}, {2}), 4);
      },
      {"[embedding_backward]", "float32[3, 2]", "int64[2]", "test_embedding.cpp"});
  expect_error(
      [] {
        embedding_backward(zeros({2, 2}), idx({0, 4}, {2}), 4);
      },
      {"[embedding_backward]", "got index 4", "V = 4", "test_embedding.cpp"});
}

TEST(Embedding, MetaShapes) {
  Tensor w = empty({5, 3}, {DType::Float32, kMeta});
  Tensor i = empty({2, 4}, {DType::Int64, kMeta});
  EXPECT_EQ(embedding(w, i).shape(), (Shape{2, 4, 3}));
}

}  // namespace
}  // namespace kiln
