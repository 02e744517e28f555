// batch_norm_backward (the fused first-order gradient) against batch_norm's differentiable
// decomposition, which create_graph selects.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

void expect_close(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * scale) << "element " << i;
}

struct Grads {
  Tensor x, w, b;
};

// Gradients of sum(batch_norm(x) * gy) with respect to (x, weight, bias); create_graph makes
// batch_norm differentiate through its decomposition instead of the fused op.
Grads bn_grads(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy,
               bool create_graph) {
  Tensor x = x0.detach(), w = w0.detach(), b = b0.detach();
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5);
  std::vector<Tensor> g = grad({sum(mul(y, gy))}, {x, w, b}, {}, false, create_graph);
  return {g[0].detach(), g[1].detach(), g[2].detach()};
}

// Rows of 21 (two 8-wide blocks and a tail) and rows shorter than one block.
TEST(BatchNormBackward, FusedMatchesDecomposition) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (Shape shape : {Shape{8, 5, 3, 7}, Shape{16, 3, 5}, Shape{32, 4}}) {
      SCOPED_TRACE(dtype_name(dt));
      manual_seed(7);
      Tensor x = add(mul(randn(shape, {dt}), 3.0), 1.5);
      Tensor gy = randn(shape, {dt});
      Tensor w = rand({shape[1]}, {dt}), b = randn({shape[1]}, {dt});
      Grads fused = bn_grads(x, w, b, gy, false), decomposed = bn_grads(x, w, b, gy, true);
      const double tol = dt == DType::Float32 ? 1e-5 : 1e-12;
      expect_close(fused.x, decomposed.x, tol);
      expect_close(fused.w, decomposed.w, tol);
      expect_close(fused.b, decomposed.b, tol);
    }
  }
}

// Gradients that reach the statistics themselves are folded in: compared with autograd through
// primitive ops of sum(y * gy) + sum(mean * gm) + sum(var * gv).
TEST(BatchNormBackward, GradientsOfTheStatistics) {
  manual_seed(3);
  const Shape shape{6, 3, 10};
  Tensor x = randn(shape, {DType::Float64}).detach();
  Tensor gy = randn(shape, {DType::Float64}), w = rand({3}, {DType::Float64});
  Tensor gm = randn({3}, {DType::Float64}), gv = randn({3}, {DType::Float64});
  x.set_requires_grad(true);
  Tensor m = mean(x, {0, 2}), v = var(x, {0, 2}, 0);
  Tensor y = reference::batch_norm(x, Tensor(), Tensor(), w, Tensor(), true, 1e-5);
  Tensor loss = add(add(sum(mul(y, gy)), sum(mul(m, gm))), sum(mul(v, gv)));
  Tensor want = grad({loss}, {x})[0];
  NoGradGuard no_grad;
  std::vector<Tensor> got =
      batch_norm_backward(gy, x.detach(), m.detach(), v.detach(), w, 1e-5, gm, gv);
  expect_close(got[0], want, 1e-12);
}

// 16-bit floats take the scalar loops, computing in float32: compared with the float32 run.
TEST(BatchNormBackward, SixteenBitFloats) {
  manual_seed(9);
  Tensor x = randn({4, 3, 5, 5}), gy = randn({4, 3, 5, 5}), w = rand({3}), b = randn({3});
  const Grads want = bn_grads(x, w, b, gy, false);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Grads got =
        bn_grads(to_dtype(x, dt), to_dtype(w, dt), to_dtype(b, dt), to_dtype(gy, dt), false);
    const double tol = dt == DType::Float16 ? 1e-2 : 5e-2;
    expect_close(to_dtype(got.x, DType::Float32), want.x, tol);
    expect_close(to_dtype(got.w, DType::Float32), want.w, tol);
    expect_close(to_dtype(got.b, DType::Float32), want.b, tol);
  }
}

TEST(BatchNormBackward, SameBitsForAnyThreadCount) {
  manual_seed(11);
  Tensor x = randn({64, 8, 9, 9}), gy = randn({64, 8, 9, 9}), w = rand({8});
  Tensor m = mean(x, {0, 2, 3}), v = var(x, {0, 2, 3}, 0);
  const int before = get_num_threads();
  set_num_threads(1);
  std::vector<Tensor> one = batch_norm_backward(gy, x, m, v, w);
  set_num_threads(2);
  std::vector<Tensor> two = batch_norm_backward(gy, x, m, v, w);
  set_num_threads(before);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_EQ(std::memcmp(one[i].raw_data(), two[i].raw_data(), one[i].nbytes()), 0) << i;
}

using test::expect_error;

TEST(BatchNormBackward, Errors) {
  Tensor x = randn({4, 3, 5}), gy = randn({4, 3, 5});
  Tensor m = zeros({3}), v = ones({3});
  expect_error(
      [&] {
        batch_norm_backward(randn({4, 3, 6}), x, m, v, Tensor());
      },
      {"[batch_norm_backward]", "grad_out", "[4, 3, 6]", "test_norm_backward.cpp"});
  expect_error([&] { batch_norm_backward(gy, x, zeros({4}), v, Tensor()); },
               {"[batch_norm_backward]", "mean", "[4]"});
  expect_error([&] { batch_norm_backward(gy, x, m, v, ones({3}, {DType::Float64})); },
               {"[batch_norm_backward]", "weight", "float64"});
  expect_error([&] { batch_norm_backward(gy, x, m, v, Tensor(), 1e-5, zeros({3})); },
               {"grad_mean and grad_var"});
  Tensor leaf = x.detach();
  leaf.set_requires_grad(true);
  expect_error([&] { batch_norm_backward(gy, leaf, m, v, Tensor()); },
               {"[batch_norm_backward]", "not differentiable", "create_graph"});
  NoGradGuard no_grad;
  EXPECT_NO_THROW(batch_norm_backward(gy, leaf, m, v, Tensor()));
}

}  // namespace
}  // namespace kiln
