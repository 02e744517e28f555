// Regression tests for defects a differential fuzzer against PyTorch 1.13 found (issue 12): each
// is the minimal repro, with PyTorch's answer as the expectation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "kiln/autograd/engine.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/pool.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;
using test::expect_values;
using test::leaf;

// 1. copy_ from a source that does not require grad: the old history gets a zero gradient.
TEST(PytorchSemantics, CopyFromAConstantGivesTheOldHistoryAZeroGradient) {
  Tensor a = leaf({2.0});
  Tensor y = mul(a, 3.0);
  y.copy_(tensor({5.0}, {DType::Float64}));
  EXPECT_TRUE(y.requires_grad());
  expect_values(y, {5.0});
  sum(y).backward();
  ASSERT_TRUE(a.grad().defined());
  expect_values(a.grad(), {0.0});
}

TEST(PytorchSemantics, CopyFromASourceThatRequiresGradRoutesTheGradientToIt) {
  Tensor a = leaf({2.0}), b = leaf({7.0});
  Tensor y = mul(a, 3.0);
  y.copy_(mul(b, 2.0));
  sum(y).backward();
  EXPECT_TRUE(!a.grad().defined() || a.grad().to_vector<double>()[0] == 0.0);
  expect_values(b.grad(), {2.0});
}

// 8. fill_ / zero_ on a non-leaf that requires grad keep requires_grad, with a zero gradient.
TEST(PytorchSemantics, FillOfANonLeafKeepsRequiresGrad) {
  for (bool zero : {false, true}) {
    Tensor a = leaf({1.0, 2.0});
    Tensor y = mul(a, 3.0);
    if (zero)
      y.zero_();
    else
      y.fill_(4.0);
    EXPECT_TRUE(y.requires_grad());
    expect_values(y, {zero ? 0.0 : 4.0, zero ? 0.0 : 4.0});
    y.retain_grad();
    sum(mul(y, 2.0)).backward();
    expect_values(a.grad(), {0.0, 0.0});
    expect_values(y.grad(), {2.0, 2.0});
  }
}

// 5. Results that are views only of kiln's own temporaries accept in-place ops.
TEST(PytorchSemantics, InPlaceOnAMatmulResult) {
  Tensor w = leaf({1.0, 2.0, 3.0, 4.0});
  Tensor x = tensor({1.0, 1.0, 2.0, 0.5}, {DType::Float64});
  Tensor m = matmul(reshape(x, {2, 2}), reshape(w, {2, 2}));
  EXPECT_FALSE(m.is_view());
  m.mul_(2.0);
  sum(m).backward();
  // d sum(2 X W) / dW = 2 X^T 1: rows of X summed per column.
  expect_values(w.grad(), {6.0, 6.0, 3.0, 3.0});
  Tensor v = matmul(tensor({1.0, 2.0}, {DType::Float64}), reshape(mul(w, 1.0), {2, 2}));
  v.add_(1.0);  // 1-D @ 2-D
}

TEST(PytorchSemantics, InPlaceOnAReshapeThatCopied) {
  Tensor w = leaf({1.0, 2.0, 3.0, 4.0, 5.0, 6.0});
  Tensor t = transpose(reshape(mul(w, 1.0), {2, 3}), 0, 1);  // non-contiguous [3, 2]
  Tensor r = reshape(t, {6});                                // a copy
  EXPECT_FALSE(r.is_view());
  r.mul_(tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {DType::Float64}));
  sum(r).backward();
  // r[i] = t.flat[i] * (i + 1); t.flat = [w0, w3, w1, w4, w2, w5].
  expect_values(w.grad(), {1.0, 3.0, 5.0, 2.0, 4.0, 6.0});
  // A reshape that is a view stays one.
  Tensor base = mul(w, 1.0);
  EXPECT_TRUE(reshape(base, {3, 2}).is_view());
}

// 6. An op saves only what its vjp reads for the inputs that need a gradient, so an in-place
// change of anything else is no error (PyTorch's behaviour).
TEST(PytorchSemantics, MulSavesOnlyTheOperandTheOtherGradientReads) {
  Tensor w = leaf({1.0, 1.0});
  Tensor a = mul(w, 2.0);
  Tensor y = mul(a, tensor({3.0, 4.0}, {DType::Float64}));
  a.add_(1.0);  // a's value is not needed for a's gradient
  sum(y).backward();
  expect_values(w.grad(), {6.0, 8.0});
  // When both need a gradient both are saved, and the in-place change is caught.
  Tensor u = leaf({1.0}), v = leaf({2.0});
  Tensor p = mul(u, 1.0), q = mul(p, v);
  p.add_(1.0);
  expect_contains(error_of([&] { sum(q).backward(); }), {"modified in place", "'mul'"});
}

TEST(PytorchSemantics, WhereMaxPoolAndConvKeepOnlyWhatTheirGradientsRead) {
  Tensor w = leaf({1.0, 2.0});
  Tensor a = mul(w, 1.0), b = mul(w, 3.0);
  Tensor y = where(tensor(std::vector<bool>{true, false}), a, b);
  a.add_(1.0);  // where reads the condition only
  b.mul_(2.0);
  sum(y).backward();
  expect_values(w.grad(), {1.0, 3.0});

  Tensor x = randn({1, 1, 4, 4}, {DType::Float64});
  x.set_requires_grad(true);
  Tensor pooled = max_pool2d(mul(x, 1.0), 2);
  Tensor z = mul(pooled, 1.0);
  pooled.add_(1.0);  // max_pool2d's gradient reads its indices, not its values
  sum(z).backward();
  EXPECT_EQ(sum(x.grad()).item<double>(), 4.0);

  Tensor cw = randn({2, 1, 3, 3}, {DType::Float64});
  cw.set_requires_grad(true);
  Tensor bias = zeros({2}, {DType::Float64});
  Tensor out = conv2d(randn({1, 1, 5, 5}, {DType::Float64}), cw, bias);
  bias.add_(1.0);  // never read by the gradient
  sum(out).backward();
  EXPECT_TRUE(cw.grad().defined());
}

// 7. Dtype and rank checks PyTorch makes.
TEST(PytorchSemantics, InPlaceNumbersIntoABoolTensorAreRefused) {
  Tensor b = tensor(std::vector<bool>{true, false});
  expect_contains(error_of([&] { b.mul_(3.0); }), {"[mul_]", "bool", "castable"});
  expect_contains(error_of([&] { b.add_(tensor(std::vector<int64_t>{1, 2})); }), {"[add_]"});
  b.copy_(tensor({0.0, 2.0}));  // assignment converts, as in PyTorch
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{false, true}));
}

TEST(PytorchSemantics, TransposeOfAScalarChecksDimsAndMakesANewView) {
  Tensor s = scalar_tensor(1.0);
  expect_contains(error_of([&] { (void)transpose(s, 0, 5); }), {"[transpose]", "range"});
  Tensor t = transpose(s, 0, -1);
  EXPECT_FALSE(t.is_same(s));
  EXPECT_EQ(t.dim(), 0);
  EXPECT_FALSE(s.t().is_same(s));
}

TEST(PytorchSemantics, SubtractionWithABoolTensorIsRefused) {
  Tensor f = tensor({1.0, 2.0}), b = tensor(std::vector<bool>{true, false});
  Tensor i = tensor(std::vector<int64_t>{1, 2});
  for (auto [x, y] : {std::pair{f, b}, std::pair{b, f}, std::pair{i, b}, std::pair{b, b}})
    expect_contains(error_of([&] { (void)sub(x, y); }), {"[sub]", "bool"});
}

TEST(PytorchSemantics, FloatOnlyActivationsRefuseIntegerAndBoolTensors) {
  Tensor i = tensor(std::vector<int64_t>{1, 2}), b = tensor(std::vector<bool>{true, false});
  for (const Tensor& x : {i, b}) {
    expect_contains(error_of([&] { (void)gelu(x); }), {"[gelu]", "floating-point"});
    expect_contains(error_of([&] { (void)silu(x); }), {"[silu]", "floating-point"});
    expect_contains(error_of([&] { (void)softplus(x); }), {"[softplus]", "floating-point"});
  }
  // exp, tanh and sigmoid of integers compute in float32, as PyTorch's do.
  EXPECT_EQ(exp(i).dtype(), DType::Float32);
}

// 3. Gradients at singular points are PyTorch's (0, or its +-inf / -0), not nan.
std::vector<double> grad_of(const std::function<Tensor(const Tensor&)>& f,
                            std::initializer_list<double> values) {
  Tensor x = leaf(values);
  sum(f(x)).backward();
  return x.grad().to_vector<double>();
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i << ": " << got[i];
    } else {
      EXPECT_EQ(got[i], want[i]) << "at " << i;
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << "sign at " << i;
    }
  }
}

#define EXPECT_SAME(got, ...)      \
  do {                             \
    SCOPED_TRACE(#got);            \
    expect_same(got, __VA_ARGS__); \
  } while (0)

TEST(PytorchSemantics, VarStdAndNormGradientsAtSingularPoints) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  auto v = [](int64_t c) { return [c](const Tensor& x) { return var(x, {0}, c); }; };
  auto s = [](int64_t c) { return [c](const Tensor& x) { return kiln::std(x, {0}, c); }; };
  // The expectations are PyTorch 1.13's (torch.var / torch.std with dim=0, correction=c).
  EXPECT_SAME(grad_of(s(1), {2.0, 2.0, 2.0}), {0.0, 0.0, 0.0});
  EXPECT_SAME(grad_of(v(1), {2.0, 2.0, 2.0}), {0.0, 0.0, 0.0});
  EXPECT_SAME(grad_of(s(0), {3.0}), {0.0});
  EXPECT_SAME(grad_of(v(0), {3.0}), {0.0});
  EXPECT_SAME(grad_of(v(1), {3.0}), {nan});
  EXPECT_SAME(grad_of(v(2), {1.0, 2.0}), {-inf, inf});
  EXPECT_SAME(grad_of(s(2), {1.0, 2.0}), {nan, nan});
  EXPECT_SAME(grad_of(v(3), {1.0, 2.0}), {1.0, -1.0});
  EXPECT_SAME(grad_of(s(3), {1.0, 2.0}), {0.0, -0.0});
  EXPECT_SAME(grad_of(v(3), {3.0}), {-0.0});
  EXPECT_TRUE(std::isinf(var(tensor({1.0, 2.0}, {DType::Float64}), {0}, 3).item<double>()));
  // Norms.
  EXPECT_SAME(grad_of([](const Tensor& x) { return norm(x); }, {0.0, 0.0}), {0.0, 0.0});
  EXPECT_SAME(grad_of([](const Tensor& x) { return norm(x, 3.0); }, {0.0, 0.0}), {0.0, 0.0});
  EXPECT_SAME(grad_of([](const Tensor& x) { return norm(x, 3.0); }, {0.0, 1.0}), {0.0, 1.0});
  std::vector<double> g = grad_of([](const Tensor& x) { return norm(x, 0.5); }, {0.0, 2.5, -1.5});
  EXPECT_EQ(g[0], 0.0);
  EXPECT_NEAR(g[1], 1.7745966692414832, 1e-12);
  EXPECT_NEAR(g[2], -2.290994448735806, 1e-12);
}

TEST(PytorchSemantics, CrossEntropyWithEveryTargetIgnoredHasAZeroGradient) {
  for (double smoothing : {0.0, 0.1}) {
    Tensor x = zeros({3, 4}, {DType::Float64});
    x.set_requires_grad(true);
    Tensor loss = cross_entropy(x, tensor(std::vector<int64_t>{-100, -100, -100}), Tensor(), -100,
                                Reduction::Mean, smoothing);
    EXPECT_TRUE(std::isnan(loss.item<double>()));  // 0 / 0, as PyTorch's
    loss.backward();
    for (double v : x.grad().to_vector<double>()) EXPECT_EQ(v, 0.0);
  }
}

// 4. A layout oneDNN refuses falls back to a copy, and no library exception escapes raw.
TEST(PytorchSemantics, BmmOfARowSliceThatOneDnnRefuses) {
  Tensor a = reshape(arange(42.0, TensorOptions{DType::Float32}), {3, 2, 7});
  Tensor b = slice(reshape(arange(78.0, TensorOptions{DType::Float32}), {3, 13, 2}), 1, 0,
                   std::nullopt, 2);
  Tensor got = bmm(a, b);
  Tensor want = bmm(contiguous(a), contiguous(b));
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
  EXPECT_EQ(bmm(ones({3, 2, 7}), slice(ones({3, 13, 2}), 1, 0, std::nullopt, 2)).to_vector<float>(),
            std::vector<float>(12, 7.0f));
}

struct ThrowingOp final : Op {
  const char* name() const override { return "throwing"; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    return {{in[0].shape(), in[0].dtype(), in[0].device()}};
  }
};
void throwing_kernel(const Op&, const std::vector<Tensor>&, const std::vector<Tensor>&) {
  throw std::length_error("vector::reserve");
}
KILN_REGISTER_KERNEL("throwing", DeviceType::CPU, throwing_kernel);

TEST(PytorchSemantics, ALibraryExceptionInAKernelBecomesAnInternalErrorNamingTheOp) {
  int line = 0;
  try {
    line = __LINE__ + 1;
    (void)dispatch1(std::make_shared<ThrowingOp>(), {ones({2})}, Loc::current());
    ADD_FAILURE() << "expected InternalError";
  } catch (const InternalError& e) {
    expect_contains(e.what(), {"[throwing]", "vector::reserve", "float32[2]",
                               "test_pytorch_semantics.cpp:" + std::to_string(line)});
  }
}

// 9. Empty batches give empty results, as in PyTorch.
TEST(PytorchSemantics, EmptyBatches) {
  Tensor x = zeros({0, 3, 4, 4});
  x.set_requires_grad(true);
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), /*training=*/true);
  EXPECT_EQ(y.shape(), (Shape{0, 3, 4, 4}));
  expect_values(rm, {0, 0, 0});  // unchanged
  expect_values(rv, {1, 1, 1});
  sum(y).backward();
  EXPECT_EQ(x.grad().shape(), (Shape{0, 3, 4, 4}));
  EXPECT_EQ(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true).numel(), 0);
  // One value per channel is still refused (the variance is undefined).
  expect_contains(error_of([] {
                    (void)batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
                  }),
                  {"[batch_norm]", "more than 1 value per channel"});
  Tensor w = randn({3, 2, 3, 3});
  w.set_requires_grad(true);
  for (int64_t stride : {1, 2}) {
    ConvTranspose2dOptions o;
    o.stride = stride;
    o.padding = 1;
    Tensor z = conv_transpose2d(x, w, randn({2}), o);
    EXPECT_EQ(z.size(0), 0);
    sum(z).backward();
    expect_values(sum(abs(w.grad())), {0.0});
  }
}

// 10. maximum / minimum with a NaN operand send the gradient to both sides.
TEST(PytorchSemantics, ExtremaWithNaNSendTheGradientToBothSides) {
  const double nan = std::nan("");
  Tensor a = leaf({nan, 1.0, 2.0, 3.0}), b = leaf({1.0, nan, 2.0, 1.0});
  sum(maximum(a, b)).backward();
  expect_values(a.grad(), {1.0, 1.0, 0.5, 1.0});  // PyTorch 1.13's values
  expect_values(b.grad(), {1.0, 1.0, 0.5, 0.0});
  Tensor c = leaf({nan, 1.0, 2.0, 3.0}), d = leaf({1.0, nan, 2.0, 1.0});
  sum(minimum(c, d)).backward();
  expect_values(c.grad(), {1.0, 1.0, 0.5, 0.0});
  expect_values(d.grad(), {1.0, 1.0, 0.5, 1.0});
}

// 11. A zero-variance row normalizes to exactly bias (PyTorch: 0 for layer_norm([-3.5], [1])).
TEST(PytorchSemantics, LayerNormOfAConstantRowIsExactlyTheBias) {
  EXPECT_EQ(layer_norm(tensor({-3.5}), {1}).to_vector<float>(), std::vector<float>{0.0f});
  Tensor x = full({2, 37}, 0.1f);  // a vector body and a scalar tail
  Tensor w = ones({37}), b = full({37}, 0.25);
  for (float v : layer_norm(x, {37}, w, b).to_vector<float>()) EXPECT_EQ(v, 0.25f);
  for (float v : group_norm(full({2, 4, 9}, -7.0), 2).to_vector<float>()) EXPECT_EQ(v, 0.0f);
  for (float v : batch_norm(full({3, 2, 5}, 3.0), Tensor(), Tensor(), Tensor(), Tensor(), true)
                     .to_vector<float>())
    EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace kiln
