#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/rng.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

// The mask dropout must use: fill_bernoulli with keep probability 1 - p from the same state.
std::vector<uint8_t> expected_mask(int64_t n, double p, uint64_t seed) {
  Generator gen(seed);
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  fill_bernoulli(mask.data(), n, 1.0 - p, gen);
  return mask;
}

TEST(Dropout, IdentityWhenOffOrZero) {
  Tensor x = sample_tensor({3, 4}, 1);
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
  EXPECT_TRUE(dropout(x, 0.7, false).is_same(x));
  Generator gen(3);
  dropout(x, 0.5, false, &gen);
  EXPECT_EQ(gen.offset(), 0u);
}

TEST(Dropout, MaskComesFromFillBernoulliAndScales) {
  const double p = 0.3;
  Tensor x = sample_tensor({5, 7}, 2, 0.5, 1.5);
  Generator gen(42);
  Tensor y = dropout(x, p, true, &gen);
  EXPECT_EQ(gen.offset(), static_cast<uint64_t>((35 + 3) / 4));
  std::vector<uint8_t> mask = expected_mask(35, p, 42);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i)
    EXPECT_DOUBLE_EQ(yv[i], mask[i] ? xv[i] / (1 - p) : 0.0) << "element " << i;
}

TEST(Dropout, DeterministicGivenGeneratorState) {
  Tensor x = ones({64}, {DType::Float32});
  Generator a(7), b(7);
  Tensor ya = dropout(x, 0.5, true, &a), yb = dropout(x, 0.5, true, &b);
  EXPECT_EQ(ya.to_vector<float>(), yb.to_vector<float>());
  // The next draw continues the stream: a different mask.
  EXPECT_NE(dropout(x, 0.5, true, &a).to_vector<float>(), ya.to_vector<float>());
  // Restoring the state replays it.
  b.set_state({7, 0});
  EXPECT_EQ(dropout(x, 0.5, true, &b).to_vector<float>(), ya.to_vector<float>());
  // The default generator, reseeded, also replays.
  manual_seed(11);
  Tensor d1 = dropout(x, 0.5, true);
  manual_seed(11);
  EXPECT_EQ(dropout(x, 0.5, true).to_vector<float>(), d1.to_vector<float>());
}

TEST(Dropout, KeepsAboutOneMinusP) {
  Generator gen(5);
  Tensor y = dropout(ones({20000}, {DType::Float32}), 0.25, true, &gen);
  std::vector<float> v = y.to_vector<float>();
  int64_t kept = 0;
  for (float e : v) {
    if (e != 0) {
      EXPECT_FLOAT_EQ(e, 1.0f / 0.75f);
      ++kept;
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / 20000.0, 0.75, 0.015);
}

TEST(Dropout, StridedInputUsesLogicalOrder) {
  Tensor x = sample_tensor({4, 6}, 3).t();
  Generator a(9), b(9);
  Tensor y = dropout(x, 0.5, true, &a);
  Tensor yc = dropout(contiguous(x), 0.5, true, &b);
  EXPECT_EQ(y.to_vector<double>(), yc.to_vector<double>());
}

TEST(Dropout, GradientIsMaskOverKeep) {
  const double p = 0.4;
  Tensor x = sample_tensor({3, 5}, 4, 0.5, 1.5).set_requires_grad(true);
  Generator gen(21);
  Tensor y = dropout(x, p, true, &gen);
  Tensor g = grad({sum(y)}, {x})[0];
  std::vector<uint8_t> mask = expected_mask(15, p, 21);
  std::vector<double> gv = g.to_vector<double>();
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_DOUBLE_EQ(gv[i], mask[i] ? 1 / (1 - p) : 0.0);
  auto fn = [](const std::vector<Tensor>& in) {
    Generator fixed(77);
    return std::vector{dropout(in[0], 0.5, true, &fixed)};
  };
  EXPECT_TRUE(gradgradcheck(fn, {sample_tensor({2, 3}, 5)}));
}

TEST(Dropout, POneGivesZerosAndPropagatesNan) {
  Generator gen(1);
  Tensor x = tensor<float>({1, -2, NAN});
  std::vector<float> y = dropout(x, 1.0, true, &gen).to_vector<float>();
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(gen.offset(), 0u);
}

TEST(Dropout, MetaDrawsNothing) {
  Generator gen(1);
  Tensor y = dropout(empty({3, 4}, {DType::Float32, kMeta}), 0.5, true, &gen);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_EQ(gen.offset(), 0u);
}

TEST(Dropout, Errors) {
  expect_error(
      [] {
        dropout(zeros({2, 3}), 1.5, true);
      },
      {"[dropout]", "p in [0, 1]", "1.5", "float32[2, 3]", "test_dropout.cpp"});
  expect_error([] { dropout(zeros({2}), -0.1, false); },
               {"[dropout]", "-0.1", "float32[2]", "test_dropout.cpp"});
  expect_error([] { dropout(zeros({2}), NAN, true); }, {"[dropout]", "nan", "test_dropout.cpp"});
  expect_error([] { dropout(zeros({2}, {DType::Int64}), 0.5, true); },
               {"[dropout]", "floating-point", "int64[2]", "test_dropout.cpp"});
}

}  // namespace
}  // namespace kiln
