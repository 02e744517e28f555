#include <gtest/gtest.h>

#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/pad.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

using V = std::vector<double>;

TEST(Pad, ConstantAndCropping) {
  Tensor x = tensor<double>({1, 2, 3});
  EXPECT_EQ(pad(x, {2, 1}, "constant", 9).to_vector<double>(), (V{9, 9, 1, 2, 3, 9}));
  EXPECT_EQ(pad(x, {-1, 2}).to_vector<double>(), (V{2, 3, 0, 0}));
  EXPECT_EQ(pad(x, {-1, -2}).shape(), (Shape{0}));
  Tensor m = tensor<double>({1, 2, 3, 4}, Shape{2, 2});
  Tensor p = pad(m, {0, 1, 1, 0}, "constant", -1);
  EXPECT_EQ(p.shape(), (Shape{3, 3}));
  EXPECT_EQ(p.to_vector<double>(), (V{-1, -1, -1, 1, 2, -1, 3, 4, -1}));
  // Integer tensors pad too.
  EXPECT_EQ(pad(tensor<int64_t>({5}), {1, 0}, "constant", 7).to_vector<int64_t>(),
            (std::vector<int64_t>{7, 5}));
}

TEST(Pad, ReflectAndReplicate) {
  Tensor x = tensor<double>({1, 2, 3, 4}, Shape{1, 4});
  EXPECT_EQ(pad(x, {2, 1}, "reflect").to_vector<double>(), (V{3, 2, 1, 2, 3, 4, 3}));
  EXPECT_EQ(pad(x, {2, 1}, "replicate").to_vector<double>(), (V{1, 1, 1, 2, 3, 4, 4}));
  Tensor m = tensor<double>({1, 2, 3, 4, 5, 6}, Shape{1, 2, 3});
  // Rows reflect [r0 r1] -> [r1 r0 r1 r0]; columns [a b c] -> [b a b c b].
  Tensor r = pad(m, {1, 1, 1, 1}, "reflect");
  EXPECT_EQ(r.shape(), (Shape{1, 4, 5}));
  EXPECT_EQ(r.to_vector<double>(), (V{5, 4, 5, 6, 5, 2, 1, 2, 3, 2, 5, 4, 5, 6, 5, 2, 1, 2, 3, 2}));
  Tensor c = pad(m, {0, 1, 2, 0}, "replicate");
  EXPECT_EQ(c.to_vector<double>(), (V{1, 2, 3, 3, 1, 2, 3, 3, 1, 2, 3, 3, 4, 5, 6, 6}));
}

TEST(Pad, StridedInputs) {
  Tensor base = sample_tensor({3, 4, 5}, 1);
  for (const std::string mode : {"constant", "reflect", "replicate"}) {
    Tensor t = transpose(base, 1, 2);
    EXPECT_EQ(pad(t, {1, 2, 2, 1}, mode).to_vector<double>(),
              pad(contiguous(t), {1, 2, 2, 1}, mode).to_vector<double>())
        << mode;
  }
}

TEST(Pad, GradientsSumCopies) {
  Tensor x = zeros({1, 4}, {DType::Float64}).set_requires_grad(true);
  // reflect {2, 1}: output copies x2, x1, x0, x1, x2, x3, x2.
  Tensor g = grad({sum(pad(x, {2, 1}, "reflect"))}, {x})[0];
  EXPECT_EQ(g.to_vector<double>(), (V{1, 2, 3, 1}));
  g = grad({sum(pad(x, {2, 1}, "replicate"))}, {x})[0];
  EXPECT_EQ(g.to_vector<double>(), (V{3, 1, 1, 2}));
  g = grad({sum(pad(x, {-1, 1}, "constant", 5))}, {x})[0];
  EXPECT_EQ(g.to_vector<double>(), (V{0, 1, 1, 1}));
}

TEST(Pad, Gradchecks) {
  for (const std::string mode : {"constant", "reflect", "replicate"}) {
    std::vector<int64_t> pads =
        mode == "constant" ? std::vector<int64_t>{1, -1, 2, 0} : std::vector<int64_t>{1, 2, 2, 1};
    auto f = [=](const std::vector<Tensor>& in) { return std::vector{pad(in[0], pads, mode)}; };
    EXPECT_TRUE(gradcheck(f, {sample_tensor({2, 3, 3}, 2)})) << mode;
    EXPECT_TRUE(gradgradcheck(f, {sample_tensor({2, 3, 3}, 3)})) << mode;
  }
}

TEST(Pad, Errors) {
  expect_error(
      [] {
        pad(zeros({2, 3}), {1, 2, 3});
      },
      {"[pad]", "even number", "(1, 2, 3)", "float32[2, 3]", "test_pad.cpp"});
  expect_error(
      [] {
        pad(zeros({3}), {1, 1, 1, 1});
      },
      {"[pad]", "at most 2 per dim", "float32[3]", "test_pad.cpp"});
  expect_error(
      [] {
        pad(zeros({2, 3}), {3, 0}, "reflect");
      },
      {"[pad]", "reflect", "(3, 0)", "size 3", "float32[2, 3]", "test_pad.cpp"});
  expect_error(
      [] {
        pad(zeros({2, 3}), {-1, 0}, "replicate");
      },
      {"[pad]", "replicate", "float32[2, 3]", "test_pad.cpp"});
  expect_error(
      [] {
        pad(zeros({2, 3}), {-2, -2});
      },
      {"[pad]", "size must be >= 0", "test_pad.cpp"});
  expect_error(
      [] {
        pad(zeros({2, 3}), {1, 1}, "circular");
      },
      {"[pad]", "\"circular\"", "float32[2, 3]", "test_pad.cpp"});
  expect_error(
      [] {
        pad(zeros({1, 1, 2, 2, 2}), {1, 1, 1, 1, 1, 1, 1, 1}, "replicate");
      },
      {"[pad]", "last 3 dims", "test_pad.cpp"});
  expect_error(
      [] {
        pad_backward(zeros({2, 4}), {2, 3}, {1, 2}, "reflect");
      },
      {"[pad_backward]", "[2, 6]", "float32[2, 4]", "test_pad.cpp"});
}

TEST(Pad, MetaShapes) {
  Tensor x = empty({2, 3, 4}, {DType::Float32, kMeta});
  EXPECT_EQ(pad(x, {1, 2, -1, 0}).shape(), (Shape{2, 2, 7}));
  EXPECT_EQ(pad(x, {1, 2}, "reflect").shape(), (Shape{2, 3, 7}));
}

}  // namespace
}  // namespace kiln
