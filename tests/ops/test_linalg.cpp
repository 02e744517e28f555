#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

// Reference product of [B, M, K] and [B, K, N] given as row-major values, in double.
std::vector<double> ref_bmm(const std::vector<double>& a, const std::vector<double>& b, int64_t nb,
                            int64_t m, int64_t k, int64_t n) {
  std::vector<double> out(nb * m * n, 0.0);
  for (int64_t p = 0; p < nb; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t q = 0; q < k; ++q)
          out[(p * m + i) * n + j] += a[(p * m + i) * k + q] * b[(p * k + q) * n + j];
  return out;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
}

Tensor f32(const Tensor& t) {
  return to_dtype(t, DType::Float32);
}

TEST(Linalg, Matmul2D) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}).reshape({2, 3});
  Tensor b = tensor({7, 8, 9, 10, 11, 12}).reshape({3, 2});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(c.dtype(), DType::Float32);
  EXPECT_EQ(values(c), (std::vector<double>{58, 64, 139, 154}));
}

TEST(Linalg, MatmulVectorCases) {
  Tensor v = tensor({1, 2, 3});
  Tensor w = tensor({4, 5, 6});
  Tensor dot = matmul(v, w);
  EXPECT_EQ(dot.dim(), 0);
  EXPECT_EQ(dot.item(), 32.0);
  Tensor m = tensor({1, 0, 2, 1, 3, 1}).reshape({3, 2});  // [[1,0],[2,1],[3,1]]
  Tensor left = matmul(v, m);                             // [3] @ [3, 2]
  EXPECT_EQ(left.shape(), (Shape{2}));
  EXPECT_EQ(values(left), (std::vector<double>{14, 5}));
  Tensor right = matmul(transpose(m, 0, 1), v);  // [2, 3] @ [3]
  EXPECT_EQ(right.shape(), (Shape{2}));
  EXPECT_EQ(values(right), (std::vector<double>{14, 5}));
}

TEST(Linalg, MatmulBatchedTimes2DFoldsBatch) {
  Tensor a = sample_tensor({2, 3, 4}, 1);
  Tensor b = sample_tensor({4, 5}, 2);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 5}));
  std::vector<double> bv = values(b);
  std::vector<double> want = ref_bmm(values(a), bv, 1, 6, 4, 5);
  expect_near_all(values(c), want, 1e-12);
  // 1-D right operand: [2, 3, 4] @ [4] -> [2, 3]
  Tensor v = sample_tensor({4}, 3);
  Tensor cv = matmul(a, v);
  EXPECT_EQ(cv.shape(), (Shape{2, 3}));
  expect_near_all(values(cv), ref_bmm(values(a), values(v), 1, 6, 4, 1), 1e-12);
}

TEST(Linalg, MatmulBroadcastsBatchDims) {
  Tensor a = sample_tensor({2, 1, 3, 4}, 4);
  Tensor b = sample_tensor({3, 4, 2}, 5);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 3, 2}));
  std::vector<double> av = values(a), bv = values(b), cv = values(c);
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t q = 0; q < 3; ++q) {
      std::vector<double> am(av.begin() + p * 12, av.begin() + p * 12 + 12);
      std::vector<double> bm(bv.begin() + q * 8, bv.begin() + q * 8 + 8);
      std::vector<double> want = ref_bmm(am, bm, 1, 3, 4, 2);
      for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(cv[(p * 3 + q) * 6 + i], want[i], 1e-12);
    }
  // 1-D left against a batch: [4] @ [3, 4, 2] -> [3, 2]
  Tensor v = sample_tensor({4}, 6);
  Tensor cv1 = matmul(v, b);
  EXPECT_EQ(cv1.shape(), (Shape{3, 2}));
  // 2-D left against a batch, in float32 (oneDNN broadcasts the zero-stride batch).
  Tensor m = sample_tensor({3, 4}, 7);
  Tensor c32 = matmul(f32(m), f32(b));
  EXPECT_EQ(c32.shape(), (Shape{3, 3, 2}));
  expect_near_all(values(c32), values(matmul(m, b)), 1e-5);
}

TEST(Linalg, Float32MatchesFloat64OnLargerShapes) {
  // Sizes cross the loop's row and column tiles (4 x 256).
  Tensor a = sample_tensor({2, 37, 300}, 8);
  Tensor b = sample_tensor({2, 300, 270}, 9);
  Tensor c64 = bmm(a, b);
  std::vector<double> want = ref_bmm(values(a), values(b), 2, 37, 300, 270);
  expect_near_all(values(c64), want, 1e-12);
  expect_near_all(values(bmm(f32(a), f32(b))), want, 1e-4);
}

TEST(Linalg, StridedInputsNeedNoSpecialCare) {
  Tensor a = sample_tensor({3, 5, 4}, 10);  // used as a^T: [3, 4, 5]
  Tensor b = sample_tensor({3, 6, 5}, 11);  // used as b^T: [3, 5, 6]
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor at = transpose(to_dtype(a, dt), 1, 2), bt = transpose(to_dtype(b, dt), 1, 2);
    ASSERT_FALSE(at.is_contiguous());
    Tensor got = bmm(at, bt);
    Tensor want = bmm(contiguous(at), contiguous(bt));
    expect_near_all(values(got), values(want), 1e-6);
  }
  // A zero stride inside a matrix (a row broadcast down the rows) takes the copy path.
  Tensor row = sample_tensor({1, 1, 4}, 12);
  Tensor rows = expand(f32(row), {1, 3, 4});
  Tensor w = f32(sample_tensor({1, 4, 2}, 13));
  Tensor c = bmm(rows, w);
  expect_near_all(values(c), values(bmm(contiguous(rows), w)), 1e-6);
  // Every other row of a bigger matrix (row stride 2K).
  Tensor big = f32(sample_tensor({2, 6, 4}, 14));
  Tensor every_other = slice(big, 1, 0, std::nullopt, 2);
  expect_near_all(values(bmm(every_other, w.expand({2, 4, 2}))),
                  values(bmm(contiguous(every_other), contiguous(w.expand({2, 4, 2})))), 1e-6);
}

TEST(Linalg, HalfAndBFloat16ComputeInFloat32) {
  Tensor a = sample_tensor({2, 3, 8}, 15), b = sample_tensor({2, 8, 4}, 16);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor c = bmm(to_dtype(a, dt), to_dtype(b, dt));
    EXPECT_EQ(c.dtype(), dt);
    Tensor want =
        bmm(to_dtype(to_dtype(a, dt), DType::Float32), to_dtype(to_dtype(b, dt), DType::Float32));
    expect_near_all(values(c), values(want), 1e-2);
  }
}

TEST(Linalg, EmptyDims) {
  Tensor a = zeros({2, 3, 0}), b = zeros({2, 0, 4});
  Tensor c = bmm(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(values(c), std::vector<double>(24, 0.0));
  EXPECT_EQ(matmul(zeros({0, 3}), zeros({3, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(matmul(zeros({3}, TensorOptions{DType::Float64}),
                   zeros({2, 3, 0}, TensorOptions{DType::Float64}))
                .shape(),
            (Shape{2, 0}));
}

TEST(Linalg, Float64IsThreadCountIndependent) {
  Tensor a = sample_tensor({3, 33, 70}, 17), b = sample_tensor({3, 70, 300}, 18);
  const int before = get_num_threads();
  set_num_threads(1);
  std::vector<double> one = values(bmm(a, b));
  set_num_threads(std::max(2, before));
  std::vector<double> many = values(bmm(a, b));
  set_num_threads(before);
  EXPECT_EQ(one, many);
}

TEST(Linalg, ConcurrentCallsShareTheCache) {
  Tensor a = f32(sample_tensor({4, 16, 8}, 19)), b = f32(sample_tensor({4, 8, 12}, 20));
  std::vector<double> want = values(bmm(a, b));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      bool good = true;
      for (int i = 0; i < 20; ++i) good = good && values(bmm(a, b)) == want;
      ok[t] = good;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
}

TEST(Linalg, Gradients) {
  Tensor a = sample_tensor({2, 3}, 21).set_requires_grad(true);
  Tensor b = sample_tensor({3, 4}, 22).set_requires_grad(true);
  Tensor g = sample_tensor({2, 4}, 23);
  std::vector<Tensor> grads = grad({matmul(a, b)}, {a, b}, {g});
  // ga = g b^T, gb = a^T g
  expect_near_all(values(grads[0]), values(matmul(g, transpose(b.detach(), 0, 1))), 1e-12);
  expect_near_all(values(grads[1]), values(matmul(transpose(a.detach(), 0, 1), g)), 1e-12);
  // Broadcast batch: the gradient of the broadcast operand sums over the batch.
  Tensor m = sample_tensor({3, 4}, 24).set_requires_grad(true);
  Tensor batch = sample_tensor({5, 4, 2}, 25);
  Tensor gm = grad({sum(matmul(m, batch))}, {m})[0];
  EXPECT_EQ(gm.shape(), (Shape{3, 4}));
  expect_near_all(
      values(gm),
      values(sum(matmul(ones({5, 3, 2}, {DType::Float64}), transpose(batch, 1, 2)), {0})), 1e-12);
}

TEST(Linalg, SecondOrderGradient) {
  // f = sum(a b): ga[i][k] = sum_j b[k][j], so d(sum(ga * w))/db[k][j] = sum_i w[i][k].
  Tensor a = sample_tensor({2, 3}, 26).set_requires_grad(true);
  Tensor b = sample_tensor({3, 4}, 27).set_requires_grad(true);
  Tensor ga = grad({sum(matmul(a, b))}, {a}, {}, false, true)[0];
  ASSERT_TRUE(ga.requires_grad());
  Tensor w = sample_tensor({2, 3}, 28);
  Tensor gb = grad({sum(ga * w)}, {b})[0];
  std::vector<double> col = values(sum(w, {0}));
  std::vector<double> want;
  for (double c : col)
    for (int j = 0; j < 4; ++j) want.push_back(c);
  expect_near_all(values(gb), want, 1e-12);
}

TEST(Linalg, Errors) {
  expect_error(
      [] {
        matmul(zeros({2, 3}), zeros({4, 5}));
      },
      {"[matmul] expected the inner dimensions to match, but got float32[2, 3] @ "
       "float32[4, 5] (3 != 4)",
       "test_linalg.cpp"});
  expect_error([] { matmul(zeros({3}), zeros({4})); }, {"[matmul]", "[3]", "[4]", "(3 != 4)"});
  expect_error([] { matmul(scalar_tensor(1.0), zeros({4})); },
               {"[matmul]", "float32[] on cpu", "float32[4] on cpu", "test_linalg.cpp"});
  expect_error(
      [] {
        matmul(zeros({2, 3}), zeros({3, 2}, {DType::Float64}));
      },
      {"[matmul]", "same dtype", "float32[2, 3]", "float64[3, 2]", "test_linalg.cpp"});
  expect_error(
      [] {
        matmul(zeros({2, 3}, {DType::Int64}), zeros({3, 2}, {DType::Int64}));
      },
      {"[matmul]", "unsupported dtype int64", "int64[2, 3]", "test_linalg.cpp"});
  expect_error(
      [] {
        matmul(zeros({2, 2, 3}), zeros({3, 3, 2}));
      },
      {"[matmul] expected batch dimensions that broadcast, but got float32[2, 2, 3] @ "
       "float32[3, 3, 2] (batch [2] vs [3])",
       "test_linalg.cpp"});
  expect_error(
      [] {
        bmm(zeros({2, 3}), zeros({2, 3, 4}));
      },
      {"[bmm]", "3-D", "float32[2, 3] on cpu", "test_linalg.cpp"});
  expect_error(
      [] {
        bmm(zeros({2, 3, 4}), zeros({3, 4, 5}));
      },
      {"[bmm]", "batch", "float32[2, 3, 4]", "float32[3, 4, 5]", "test_linalg.cpp"});
  expect_error(
      [] {
        bmm(zeros({2, 3, 4}), zeros({2, 5, 5}));
      },
      {"[bmm] expected the inner dimensions to match", "(4 != 5)"});
}

TEST(Linalg, MetaShapes) {
  Tensor a = empty({2, 1, 3, 4}, {DType::Float32, kMeta});
  Tensor b = empty({5, 4, 6}, {DType::Float32, kMeta});
  Tensor c = matmul(a, b);
  EXPECT_TRUE(c.is_meta());
  EXPECT_EQ(c.shape(), (Shape{2, 5, 3, 6}));
}

}  // namespace
}  // namespace kiln
