#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::expect_values;

void expect_close(const Tensor& a, const Tensor& b, double tol) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.dtype(), b.dtype());
  expect_values(a, b.to_vector<double>(), tol);
}

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

TEST(BatchNorm, TrainingHandComputedAndRunningUpdate) {
  // One channel holding 1, 3, 5, 7: mean 4, biased var 5, unbiased var 20 / 3.
  Tensor x = tensor<double>({1, 3, 5, 7}, Shape{2, 1, 2});
  Tensor rm = zeros({1}, {DType::Float64}), rv = ones({1}, {DType::Float64});
  const uint64_t v_mean = rm.version(), v_var = rv.version();
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 0.0);
  const double s = std::sqrt(5.0);
  expect_values(y, {-3 / s, -1 / s, 1 / s, 3 / s}, 1e-12);
  expect_values(rm, {0.9 * 0 + 0.1 * 4}, 1e-12);
  expect_values(rv, {0.9 * 1 + 0.1 * 20.0 / 3.0}, 1e-12);
  EXPECT_GT(rm.version(), v_mean);
  EXPECT_GT(rv.version(), v_var);
  // Affine: weight 2, bias -1.
  Tensor w = full({1}, 2.0, {DType::Float64}), b = full({1}, -1.0, {DType::Float64});
  expect_values(batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 0.0),
                {-6 / s - 1, -2 / s - 1, 2 / s - 1, 6 / s - 1}, 1e-12);
}

TEST(BatchNorm, RunningStatsGetNoGradientEvenWhenInputsRequireIt) {
  Tensor x = sample_tensor({4, 3}, 1).set_requires_grad(true);
  Tensor rm = zeros({3}, {DType::Float64}), rv = ones({3}, {DType::Float64});
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(rm.requires_grad());
  EXPECT_FALSE(rv.requires_grad());
}

TEST(BatchNorm, EvalUsesRunningStats) {
  Tensor x = tensor<float>({1, 2, 3, 4}, Shape{2, 2});
  Tensor rm = tensor<float>({1, 2}), rv = tensor<float>({4, 1});
  Tensor w = tensor<float>({2, 1}), b = tensor<float>({0, 10});
  Tensor y = batch_norm(x, rm, rv, w, b, false, 0.1, 0.0);
  EXPECT_EQ(y.dtype(), DType::Float32);
  expect_values(y, {0, 10, 2, 12}, 1e-6);
  // Evaluation never changes the running statistics.
  expect_values(rm, {1, 2}, 0);
  expect_values(rv, {4, 1}, 0);
}

TEST(BatchNorm, MatchesReferenceAndGradients) {
  Tensor base = sample_tensor({3, 4, 2, 3}, 2, -2, 3);
  Tensor w = sample_tensor({4}, 3, 0.5, 1.5), b = sample_tensor({4}, 4);
  Tensor rm = sample_tensor({4}, 5), rv = sample_tensor({4}, 6, 0.5, 2);
  for (const Tensor& x0 : {base, permute(base, {0, 1, 3, 2})}) {
    for (bool training : {true, false}) {
      Tensor x = detach(x0).set_requires_grad(true);
      Tensor y = training ? batch_norm(x, Tensor(), Tensor(), w, b, true)
                          : batch_norm(x, rm, rv, w, b, false);
      Tensor r = reference::batch_norm(x, rm, rv, w, b, training, 1e-5);
      expect_close(y, r, 1e-12);
      Tensor seed = sample_tensor(y.shape(), 7);
      expect_close(grad({sum(mul(y, seed))}, {x})[0], grad({sum(mul(r, seed))}, {x})[0], 1e-10);
    }
  }
  Tensor f = to_dtype(base, DType::Float32);
  expect_close(batch_norm(f, Tensor(), Tensor(), Tensor(), Tensor(), true),
               reference::batch_norm(f, Tensor(), Tensor(), Tensor(), Tensor(), true), 1e-5);
}

TEST(BatchNorm, GradcheckAndGradgradcheck) {
  Fn f = [](const std::vector<Tensor>& in) {
    return std::vector{batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true)};
  };
  std::vector<Tensor> in{sample_tensor({3, 2, 2}, 8, -2, 2), sample_tensor({2}, 9, 0.5, 1.5),
                         sample_tensor({2}, 10)};
  EXPECT_TRUE(gradcheck(f, in));
  EXPECT_TRUE(gradgradcheck(f, in));
}

TEST(BatchNorm, MomentumConvention) {
  // kiln/PyTorch momentum 0.01 is Keras momentum 0.99: the new value weighs 0.01.
  Tensor x = tensor<double>({0, 2}, Shape{2, 1});
  Tensor rm = full({1}, 10.0, {DType::Float64}), rv = ones({1}, {DType::Float64});
  batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.01);
  expect_values(rm, {0.99 * 10 + 0.01 * 1}, 1e-12);
  expect_values(rv, {0.99 * 1 + 0.01 * 2}, 1e-12);
}

TEST(BatchNorm, Errors) {
  expect_error([] { batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
               {"[batch_norm]", "rank >= 2", "float32[4]", "test_norm.cpp"});
  expect_error(
      [] {
        batch_norm(zeros({4, 3}), zeros({2}), ones({3}), Tensor(), Tensor(), true);
      },
      {"[batch_norm]", "running_mean", "float32[2]", "float32[4, 3]", "test_norm.cpp"});
  expect_error(
      [] {
        batch_norm(zeros({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false);
      },
      {"[batch_norm]", "evaluation mode", "float32[4, 3]", "test_norm.cpp"});
  expect_error(
      [] {
        batch_norm(zeros({4, 3}), Tensor(), Tensor(), zeros({3}, {DType::Float64}), Tensor(), true);
      },
      {"[batch_norm]", "weight", "float64[3]", "float32[4, 3]", "test_norm.cpp"});
  expect_error(
      [] {
        batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      {"[batch_norm]", "more than 1 value per channel", "float32[1, 3]", "test_norm.cpp"});
  expect_error(
      [] {
        batch_norm(zeros({2, 3}, {DType::Int64}), Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      {"[batch_norm]", "floating-point", "int64[2, 3]", "test_norm.cpp"});
}

TEST(LayerNorm, HandComputed) {
  Tensor x = tensor<double>({1, 2, 3, 4, 10, 10, 10, 14}, Shape{2, 4});
  Tensor y = layer_norm(x, {4}, Tensor(), Tensor(), 0.0);
  const double s = std::sqrt(1.25), t = std::sqrt(3.0);
  expect_values(y, {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s, -1 / t, -1 / t, -1 / t, 3 / t}, 1e-12);
  Tensor w = tensor<double>({1, 2, 3, 4}), b = tensor<double>({0, 0, 0, 1});
  expect_values(layer_norm(x, {4}, w, b, 0.0),
                {-1.5 / s, -1 / s, 1.5 / s, 6 / s + 1, -1 / t, -2 / t, -3 / t, 12 / t + 1}, 1e-12);
}

TEST(LayerNorm, MatchesReferenceOverLayoutsAndDtypes) {
  Tensor base = sample_tensor({3, 4, 5}, 11, -3, 3);
  Tensor w = sample_tensor({4, 5}, 12, 0.5, 1.5), b = sample_tensor({4, 5}, 13);
  for (const Tensor& x0 : {base, slice(sample_tensor({3, 4, 10}, 14), 2, 0, 10, 2)}) {
    Tensor x = detach(x0).set_requires_grad(true);
    Tensor wl = detach(w).set_requires_grad(true), bl = detach(b).set_requires_grad(true);
    Tensor y = layer_norm(x, {4, 5}, wl, bl);
    Tensor r = reference::layer_norm(x, {4, 5}, wl, bl);
    expect_close(y, r, 1e-12);
    Tensor seed = sample_tensor(y.shape(), 15);
    std::vector<Tensor> gy = grad({sum(mul(y, seed))}, {x, wl, bl});
    std::vector<Tensor> gr = grad({sum(mul(r, seed))}, {x, wl, bl});
    for (size_t i = 0; i < 3; ++i) expect_close(gy[i], gr[i], 1e-10);
  }
  Tensor f = to_dtype(base, DType::Float32);
  expect_close(layer_norm(f, {5}), reference::layer_norm(f, {5}, Tensor(), Tensor()), 1e-5);
  Tensor h = to_dtype(base, DType::BFloat16);
  Tensor yh = layer_norm(h, {5});
  EXPECT_EQ(yh.dtype(), DType::BFloat16);
  expect_close(to_dtype(yh, DType::Float32), layer_norm(to_dtype(h, DType::Float32), {5}), 2e-2);
}

TEST(LayerNorm, Gradgradcheck) {
  Fn f = [](const std::vector<Tensor>& in) {
    return std::vector{layer_norm(in[0], {3}, in[1], in[2])};
  };
  std::vector<Tensor> in{sample_tensor({2, 3}, 16, -2, 2), sample_tensor({3}, 17, 0.5, 1.5),
                         sample_tensor({3}, 18)};
  EXPECT_TRUE(gradgradcheck(f, in));
}

TEST(LayerNorm, Errors) {
  expect_error(
      [] {
        layer_norm(zeros({2, 3}), {2});
      },
      {"[layer_norm]", "normalized_shape [2]", "float32[2, 3]", "test_norm.cpp"});
  expect_error(
      [] {
        layer_norm(zeros({2, 3}), {});
      },
      {"[layer_norm]", "normalized_shape []", "test_norm.cpp"});
  expect_error(
      [] {
        layer_norm(zeros({2, 3}), {3}, zeros({2}));
      },
      {"[layer_norm]", "weight of shape [3]", "float32[2]", "test_norm.cpp"});
}

TEST(GroupNorm, MatchesReference) {
  Tensor x = sample_tensor({2, 6, 3, 2}, 21, -2, 2).set_requires_grad(true);
  Tensor w = sample_tensor({6}, 22, 0.5, 1.5), b = sample_tensor({6}, 23);
  for (int64_t groups : {1, 2, 3, 6}) {
    Tensor y = group_norm(x, groups, w, b);
    Tensor r = reference::group_norm(x, groups, w, b);
    expect_close(y, r, 1e-12);
    Tensor seed = sample_tensor(y.shape(), 24);
    expect_close(grad({sum(mul(y, seed))}, {x})[0], grad({sum(mul(r, seed))}, {x})[0], 1e-10);
  }
  // Two channels per group of one element each: hand values.
  Tensor small = tensor<double>({1, 3, 5, 9}, Shape{1, 4});
  expect_values(group_norm(small, 2, Tensor(), Tensor(), 0.0), {-1, 1, -1, 1}, 1e-12);
}

TEST(GroupNorm, Gradgradcheck) {
  Fn f = [](const std::vector<Tensor>& in) {
    return std::vector{group_norm(in[0], 2, in[1], in[2])};
  };
  std::vector<Tensor> in{sample_tensor({2, 4, 2}, 25, -2, 2), sample_tensor({4}, 26, 0.5, 1.5),
                         sample_tensor({4}, 27)};
  EXPECT_TRUE(gradcheck(f, in));
  EXPECT_TRUE(gradgradcheck(f, in));
}

TEST(GroupNorm, Errors) {
  expect_error(
      [] {
        group_norm(zeros({2, 6, 3}), 4);
      },
      {"[group_norm]", "num_groups 4", "float32[2, 6, 3]", "test_norm.cpp"});
  expect_error(
      [] {
        group_norm(zeros({2, 6, 3}), 3, Tensor(), zeros({3}));
      },
      {"[group_norm]", "bias of shape [6]", "float32[3]", "test_norm.cpp"});
}

TEST(Norm, MetaShapes) {
  Tensor x = empty({2, 6, 3}, {DType::Float32, kMeta});
  Tensor rm = empty({6}, {DType::Float32, kMeta}), rv = empty({6}, {DType::Float32, kMeta});
  EXPECT_EQ(batch_norm(x, rm, rv, Tensor(), Tensor(), true).shape(), (Shape{2, 6, 3}));
  EXPECT_EQ(layer_norm(x, {6, 3}).shape(), (Shape{2, 6, 3}));
  EXPECT_EQ(group_norm(x, 3).shape(), (Shape{2, 6, 3}));
}

}  // namespace
}  // namespace kiln
