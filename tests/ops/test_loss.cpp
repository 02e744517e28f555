#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/unary.h"
#include "tests/samples/registry.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::expect_values;

void expect_close(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_TRUE(a.defined());
  ASSERT_TRUE(b.defined());
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.dtype(), b.dtype());
  expect_values(a, b.to_vector<double>(), tol);
}

Tensor longs(const std::vector<int64_t>& v, Shape shape) {
  return tensor<int64_t>(v, shape);
}

TEST(CrossEntropy, HandComputedValues) {
  Tensor x = tensor<float>({1, 2, 3, 1, 1, 1}, Shape{2, 3});
  Tensor t = longs({2, 0}, {2});
  const double l0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3;
  const double l1 = std::log(3.0);
  expect_values(cross_entropy(x, t, Tensor(), -100, Reduction::None), {l0, l1}, 1e-6);
  expect_values(cross_entropy(x, t), {(l0 + l1) / 2}, 1e-6);
  expect_values(cross_entropy(x, t, Tensor(), -100, Reduction::Sum), {l0 + l1}, 1e-6);
  EXPECT_EQ(cross_entropy(x, t).dtype(), DType::Float32);
  EXPECT_EQ(cross_entropy(x, t).dim(), 0);
  // Class weights: Mean divides by the weights of the targets (here 3 and 1), not by N.
  Tensor w = tensor<float>({1, 2, 3});
  expect_values(cross_entropy(x, t, w), {(3 * l0 + 1 * l1) / 4}, 1e-6);
  // ignore_index drops the position from the sum and from the normalizer.
  expect_values(cross_entropy(x, t, w, 0), {l0}, 1e-6);
  expect_values(cross_entropy(x, t, Tensor(), 2, Reduction::None), {0, l1}, 1e-6);
}

TEST(CrossEntropy, LabelSmoothingHandComputed) {
  Tensor x = tensor<double>({0.5, -1, 2}, Shape{1, 3});
  const double lse = std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0));
  const double lp[] = {0.5 - lse, -1 - lse, 2 - lse};
  const double eps = 0.3;
  const double want = -(1 - eps) * lp[1] - eps / 3 * (lp[0] + lp[1] + lp[2]);
  expect_values(cross_entropy(x, longs({1}, {1}), Tensor(), -100, Reduction::Mean, eps), {want},
                1e-12);
  // Probabilities: -sum_c (t_c (1 - eps) + eps / C) log p_c.
  Tensor p = tensor<double>({0.2, 0.5, 0.3}, Shape{1, 3});
  double want_p = 0;
  for (int c = 0; c < 3; ++c) want_p -= (p.to_vector<double>()[c] * (1 - eps) + eps / 3) * lp[c];
  expect_values(cross_entropy(x, p, Tensor(), -100, Reduction::Sum, eps), {want_p}, 1e-12);
}

TEST(CrossEntropy, AllIgnoredMeanIsNaN) {
  Tensor x = sample_tensor({3, 4}, 1);
  Tensor t = longs({-100, -100, -100}, {3});
  EXPECT_TRUE(std::isnan(cross_entropy(x, t).item()));
  EXPECT_TRUE(std::isnan(reference::cross_entropy(x, t).item()));
  EXPECT_EQ(cross_entropy(x, t, Tensor(), -100, Reduction::Sum).item(), 0.0);
}

struct CeCase {
  const char* label;
  Tensor x, target, weight;
  int64_t ignore_index;
  double eps;
};

std::vector<CeCase> ce_cases() {
  Tensor w4 = sample_tensor({4}, 11, 0.5, 2);
  Tensor w3 = sample_tensor({3}, 12, 0.5, 2);
  return {
      {"plain", sample_tensor({5, 4}, 1, -3, 3), longs({0, 3, 1, 2, 3}, {5}), Tensor(), -100, 0},
      {"weight_ignore", sample_tensor({5, 4}, 2, -3, 3), longs({0, 3, 1, 1, 2}, {5}), w4, 1, 0},
      {"weight_ignore_smooth", sample_tensor({5, 4}, 3, -3, 3), longs({0, 3, 1, 1, 2}, {5}), w4, 1,
       0.2},
      {"ignore_smooth", sample_tensor({5, 4}, 4, -3, 3), longs({0, 3, 1, 1, 2}, {5}), Tensor(), 3,
       0.25},
      {"spatial", sample_tensor({2, 3, 2, 3}, 5, -3, 3),
       longs({0, 2, 1, 1, 2, 0, -100, 1, 2, 0, 0, 1}, {2, 2, 3}), w3, -100, 0.1},
      {"transposed", transpose(sample_tensor({4, 5}, 6, -3, 3), 0, 1), longs({0, 3, 1, 2, 3}, {5}),
       Tensor(), -100, 0.05},
      {"unbatched", sample_tensor({4}, 7, -3, 3), longs({2}, {}), w4, -100, 0.1},
      {"probs", sample_tensor({3, 4}, 8, -3, 3), sample_tensor({3, 4}, 9, 0, 1), w4, -100, 0.1},
      {"probs_spatial", sample_tensor({2, 3, 2}, 10, -3, 3), sample_tensor({2, 3, 2}, 13, 0, 1),
       Tensor(), -100, 0},
  };
}

// The fused op against the decomposition log_softmax + nll_loss + smoothing term: values and the
// gradients of logits, probabilities target and class weights, for every reduction.
TEST(CrossEntropy, MatchesReferenceDecomposition) {
  for (const CeCase& c : ce_cases()) {
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      SCOPED_TRACE(std::string(c.label) + "/" + reduction_name(r));
      std::vector<Tensor> leaves{c.x.detach().set_requires_grad(true)};
      Tensor target = c.target, weight = c.weight;
      if (is_floating(target.dtype())) {
        target = target.detach().set_requires_grad(true);
        leaves.push_back(target);
      }
      if (weight.defined()) {
        weight = weight.detach().set_requires_grad(true);
        leaves.push_back(weight);
      }
      Tensor fused = cross_entropy(leaves[0], target, weight, c.ignore_index, r, c.eps);
      Tensor ref = reference::cross_entropy(leaves[0], target, weight, c.ignore_index, r, c.eps);
      expect_close(fused, ref, 1e-12);
      Tensor seed = sample_tensor(fused.shape(), 99, 0.5, 1.5);
      std::vector<Tensor> gf = grad({fused}, leaves, {seed});
      std::vector<Tensor> gr = grad({ref}, leaves, {seed});
      for (size_t i = 0; i < leaves.size(); ++i) expect_close(gf[i], gr[i], 1e-12);
    }
  }
}

TEST(CrossEntropy, Float32AndBFloat16MatchReference) {
  Tensor x = sample_tensor({6, 5}, 21, -4, 4);
  Tensor t = longs({0, 4, 1, 2, 3, 1}, {6});
  Tensor w = sample_tensor({5}, 22, 0.5, 2);
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    Tensor xd = to_dtype(x, dt), wd = to_dtype(w, dt);
    Tensor fused = cross_entropy(xd, t, wd, 4, Reduction::Mean, 0.1);
    EXPECT_EQ(fused.dtype(), dt);
    Tensor ref = reference::cross_entropy(x, t, w, 4, Reduction::Mean, 0.1);
    expect_values(fused, ref.to_vector<double>(), dt == DType::Float32 ? 1e-6 : 2e-2);
  }
}

TEST(CrossEntropy, Gradcheck) {
  GradcheckOptions all;  // every floating input, the class weights included
  for (const CeCase& c : ce_cases()) {
    for (Reduction r : {Reduction::None, Reduction::Mean}) {
      SCOPED_TRACE(std::string(c.label) + "/" + reduction_name(r));
      std::vector<Tensor> in{c.x, c.target};
      if (c.weight.defined()) in.push_back(c.weight);
      auto fn = [&](const std::vector<Tensor>& v) {
        return std::vector<Tensor>{
            cross_entropy(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), c.ignore_index, r, c.eps)};
      };
      EXPECT_TRUE(gradcheck(fn, in, all));
      EXPECT_TRUE(gradgradcheck(fn, in, all));
    }
  }
}

TEST(CrossEntropy, Errors) {
  expect_error(
      [] {
        cross_entropy(zeros({8, 10}), longs(std::vector<int64_t>(8, 0), {8, 1}));
      },
      {"[cross_entropy]", "expected target of shape [8] for input float32[8, 10]",
       "but got int64[8, 1]", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), longs({0, 4, 1}, {3}));
      },
      {"[cross_entropy]", "got 4 at position 1", "C = 4", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), longs({0, -1, 1}, {3}));
      },
      {"[cross_entropy]", "got -1", "[0, 4)", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), zeros({3}));
      },
      {"[cross_entropy]", "int64 class indices of shape [3]", "float32[3]", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), zeros({3, 4}, {DType::Float64}));
      },
      {"[cross_entropy]", "float32[3, 4]", "float64[3, 4]", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), tensor<int32_t>({0, 1, 2}));
      },
      {"[cross_entropy]", "int32[3]", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), longs({0, 1, 2}, {3}), zeros({3}));
      },
      {"[cross_entropy]", "weight of shape [4]", "float32[3]", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), longs({0, 1, 2}, {3}), Tensor(), -100, Reduction::Mean, 1.5);
      },
      {"[cross_entropy]", "label_smoothing in [0, 1]", "1.5", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), zeros({3, 4}), Tensor(), 0);
      },
      {"[cross_entropy]", "ignore_index 0", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(zeros({3, 4}), longs({0, 1, 2}, {3}), Tensor(), -100, Reduction::BatchMean);
      },
      {"[cross_entropy]", "batchmean", "test_loss.cpp"});
  expect_error(
      [] {
        cross_entropy(longs({0, 1}, {1, 2}), longs({0}, {1}));
      },
      {"[cross_entropy]", "floating-point input", "int64[1, 2]", "test_loss.cpp"});
}

TEST(CrossEntropy, MetaInference) {
  Tensor x = zeros({2, 5, 3}).to(kMeta), t = longs({0, 1, 2, 3, 4, 0}, {2, 3}).to(kMeta);
  Tensor none = cross_entropy(x, t, Tensor(), -100, Reduction::None);
  EXPECT_TRUE(none.is_meta());
  EXPECT_EQ(none.shape(), (Shape{2, 3}));
  EXPECT_EQ(cross_entropy(x, t).shape(), Shape{});
  EXPECT_EQ(nll_loss(x, t, Tensor(), -100, Reduction::None).shape(), (Shape{2, 3}));
}

TEST(NllLoss, HandComputedValues) {
  Tensor lp = tensor<double>({-0.5, -1.5, -2.5, -0.1, -3.0, -1.0}, Shape{2, 3});
  Tensor t = longs({2, 0}, {2});
  expect_values(nll_loss(lp, t, Tensor(), -100, Reduction::None), {2.5, 0.1}, 1e-12);
  expect_values(nll_loss(lp, t), {1.3}, 1e-12);
  Tensor w = tensor<double>({2, 1, 3});
  expect_values(nll_loss(lp, t, w), {(3 * 2.5 + 2 * 0.1) / 5}, 1e-12);
  expect_values(nll_loss(lp, t, w, 2, Reduction::Sum), {0.2}, 1e-12);
  // cross_entropy is log_softmax followed by nll_loss.
  Tensor x = sample_tensor({4, 3}, 5);
  Tensor tt = longs({0, 2, 1, 1}, {4});
  expect_close(cross_entropy(x, tt, w), nll_loss(log_softmax(x, 1), tt, w), 1e-12);
}

TEST(NllLoss, Errors) {
  expect_error(
      [] {
        nll_loss(zeros({2, 3}), longs({0, 3}, {2}));
      },
      {"[nll_loss]", "got 3 at position 1", "C = 3", "test_loss.cpp"});
  expect_error(
      [] {
        nll_loss(zeros({2, 3}), zeros({2, 3}));
      },
      {"[nll_loss]", "int64 class indices of shape [2]", "float32[2, 3]", "test_loss.cpp"});
  expect_error(
      [] {
        nll_loss(zeros({2, 3, 4}), longs({0, 1}, {2}));
      },
      {"[nll_loss]", "shape [2, 4]", "float32[2, 3, 4]", "int64[2]", "test_loss.cpp"});
}

TEST(RegressionLosses, HandComputedValues) {
  Tensor a = tensor<double>({0.0, 1.0, 3.0, -2.0});
  Tensor b = tensor<double>({0.5, 1.0, 1.0, 0.0});
  // d = -0.5, 0, 2, -2
  expect_values(mse_loss(a, b), {(0.25 + 0 + 4 + 4) / 4}, 1e-12);
  expect_values(l1_loss(a, b, Reduction::Sum), {4.5}, 1e-12);
  expect_values(smooth_l1_loss(a, b, Reduction::None), {0.125, 0, 1.5, 1.5}, 1e-12);
  expect_values(smooth_l1_loss(a, b, Reduction::None, 4.0), {0.03125, 0, 0.5, 0.5}, 1e-12);
  expect_values(smooth_l1_loss(a, b, Reduction::None, 0.0), {0.5, 0, 2, 2}, 1e-12);
  expect_values(huber_loss(a, b, Reduction::None, 0.5), {0.125, 0, 0.875, 0.875}, 1e-12);
  expect_values(huber_loss(a, b, Reduction::None, 4.0), {0.125, 0, 2, 2}, 1e-12);
  // Broadcasting and promotion follow sub().
  Tensor m =
      mse_loss(tensor<float>({1, 2}, Shape{2, 1}), tensor<double>({0, 1, 2}), Reduction::None);
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  EXPECT_EQ(m.dtype(), DType::Float64);
  expect_values(m, {1, 0, 1, 4, 1, 0}, 1e-12);
  // Strided input.
  Tensor s = sample_tensor({4, 3}, 3);
  expect_close(l1_loss(s.t(), zeros({3, 4}, {DType::Float64}), Reduction::Sum), sum(abs(s)), 1e-12);
}

TEST(RegressionLosses, Errors) {
  expect_error(
      [] {
        mse_loss(zeros({2, 3}), zeros({4}));
      },
      {"[mse_loss]", "[2, 3]", "[4]", "test_loss.cpp"});
  expect_error([] { l1_loss(longs({1}, {1}), zeros({1})); },
               {"[l1_loss]", "floating-point", "int64[1]", "test_loss.cpp"});
  expect_error([] { smooth_l1_loss(zeros({2}), zeros({2}), Reduction::Mean, -1); },
               {"[smooth_l1_loss]", "beta >= 0", "test_loss.cpp"});
  expect_error([] { huber_loss(zeros({2}), zeros({2}), Reduction::Mean, 0); },
               {"[huber_loss]", "delta > 0", "test_loss.cpp"});
  expect_error([] { mse_loss(zeros({2}), zeros({2}), Reduction::BatchMean); },
               {"[mse_loss]", "batchmean", "test_loss.cpp"});
}

TEST(BinaryCrossEntropy, HandComputedValues) {
  Tensor p = tensor<double>({0.25, 0.9});
  Tensor t = tensor<double>({1.0, 0.0});
  expect_values(binary_cross_entropy(p, t, Tensor(), Reduction::None),
                {-std::log(0.25), -std::log(0.1)}, 1e-12);
  Tensor w = tensor<double>({2.0, 0.5});
  expect_values(binary_cross_entropy(p, t, w, Reduction::Sum),
                {-2 * std::log(0.25) - 0.5 * std::log(0.1)}, 1e-12);
  // Logs are clamped at -100 (PyTorch): p = 0 with t = 1 costs 100, not inf.
  expect_values(binary_cross_entropy(tensor<double>({0.0, 1.0}), tensor<double>({1.0, 0.0}),
                                     Tensor(), Reduction::None),
                {100, 100}, 1e-12);
}

TEST(BinaryCrossEntropy, WithLogitsIsStableAndMatchesSigmoid) {
  Tensor x = sample_tensor({3, 4}, 31, -4, 4);
  Tensor t = sample_tensor({3, 4}, 32, 0, 1);
  expect_close(binary_cross_entropy_with_logits(x, t), binary_cross_entropy(sigmoid(x), t), 1e-12);
  Tensor pw = sample_tensor({4}, 33, 0.5, 3);
  Tensor with_pw = binary_cross_entropy_with_logits(x, t, Tensor(), pw, Reduction::None);
  Tensor manual =
      neg(add(mul(mul(pw, t), log(sigmoid(x))), mul(sub(1.0, t), log(sigmoid(neg(x))))));
  expect_close(with_pw, manual, 1e-12);
  // Huge logits: finite losses (|x| where wrong, ~0 where right) and finite gradients.
  Tensor big = tensor<float>({-200, 200, 300, -300}).set_requires_grad(true);
  Tensor tb = tensor<float>({1, 0, 1, 0});
  Tensor l = binary_cross_entropy_with_logits(big, tb, Tensor(), Tensor(), Reduction::None);
  expect_values(l, {200, 200, 0, 0}, 1e-4);
  expect_values(grad({l.sum()}, {big})[0], {-1, 1, 0, 0}, 1e-6);
  // Zero logits: the gradient is sigmoid(0) - t.
  Tensor z = zeros({2}, {DType::Float64}).set_requires_grad(true);
  Tensor lz = binary_cross_entropy_with_logits(z, tensor<double>({1.0, 0.25}), Tensor(), Tensor(),
                                               Reduction::Sum);
  expect_values(grad({lz}, {z})[0], {-0.5, 0.25}, 1e-12);
}

TEST(BinaryCrossEntropy, Errors) {
  expect_error(
      [] {
        binary_cross_entropy(zeros({2, 3}), zeros({3}));
      },
      {"[binary_cross_entropy]", "same shape", "float32[2, 3]", "float32[3]", "test_loss.cpp"});
  expect_error(
      [] {
        binary_cross_entropy(zeros({2, 3}), zeros({2, 3}), zeros({2, 3, 1}));
      },
      {"[binary_cross_entropy]", "float32[2, 3, 1]", "test_loss.cpp"});
  expect_error(
      [] {
        binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 3}), Tensor(), zeros({4}));
      },
      {"[binary_cross_entropy_with_logits]", "[4]", "[2, 3]", "test_loss.cpp"});
}

TEST(KlDiv, HandComputedValues) {
  Tensor in = tensor<double>({-1.0, -2.0, -0.5, -3.0}, Shape{2, 2});
  Tensor t = tensor<double>({0.25, 0.75, 0.0, 1.0}, Shape{2, 2});
  std::vector<double> want = {0.25 * (std::log(0.25) + 1), 0.75 * (std::log(0.75) + 2), 0.0, 3.0};
  expect_values(kl_div(in, t, Reduction::None), want, 1e-12);
  const double total = want[0] + want[1] + want[2] + want[3];
  expect_values(kl_div(in, t, Reduction::BatchMean), {total / 2}, 1e-12);
  expect_values(kl_div(in, t, Reduction::Mean), {total / 4}, 1e-12);
  // log_target: exp(t) (t - input), the same divergence given log-probabilities.
  Tensor tp = tensor<double>({0.25, 0.75, 0.5, 0.5}, Shape{2, 2});
  expect_close(kl_div(in, log(tp), Reduction::Sum, true), kl_div(in, tp, Reduction::Sum), 1e-12);
  // A zero target contributes nothing and its gradient stays finite.
  Tensor tg = t.detach().set_requires_grad(true);
  Tensor gi = grad({kl_div(in, tg, Reduction::Sum)}, {tg})[0];
  for (double v : gi.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
  expect_error([] { kl_div(zeros({2}), zeros({3})); }, {"[kl_div]", "[2]", "[3]", "test_loss.cpp"});
}

TEST(Reduction, Strings) {
  EXPECT_EQ(reduction_from_string("none"), Reduction::None);
  EXPECT_EQ(reduction_from_string("sum"), Reduction::Sum);
  EXPECT_EQ(reduction_from_string("batchmean"), Reduction::BatchMean);
  EXPECT_STREQ(reduction_name(Reduction::Mean), "mean");
  expect_error([] { reduction_from_string("avg"); }, {"[reduction]", "\"avg\"", "test_loss.cpp"});
}

TEST(Losses, RegistrySamplesGradgrad) {
  // Second derivatives of every registered loss sample (the composites and the fused op).
  for (const OpInfo& info : registered_ops()) {
    if (info.name.find("loss") == std::string::npos &&
        info.name.find("entropy") == std::string::npos && info.name != "kl_div")
      continue;
    for (const OpSample& s : info.samples()) {
      SCOPED_TRACE(info.name + "/" + s.label);
      GradcheckOptions options;
      options.inputs = s.grad_inputs;
      EXPECT_TRUE(gradgradcheck(s.fn, s.inputs, options));
    }
  }
}

}  // namespace
}  // namespace kiln
