#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "kiln/ops/factories.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

TEST(Factories, ZerosOnesFull) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(values(z), std::vector<double>(6, 0.0));
  EXPECT_EQ(values(ones({4}, TensorOptions{DType::Int32})), std::vector<double>(4, 1.0));
  Tensor f = full({2, 2}, 2.5, TensorOptions{DType::Float64});
  EXPECT_EQ(f.dtype(), DType::Float64);
  EXPECT_EQ(values(f), std::vector<double>(4, 2.5));
  EXPECT_EQ(values(full({3}, 2.5, TensorOptions{DType::Float16})), std::vector<double>(3, 2.5));
  EXPECT_EQ(values(full({3}, -1.0, TensorOptions{DType::BFloat16})), std::vector<double>(3, -1.0));
  EXPECT_EQ(f.to_vector<int64_t>(), std::vector<int64_t>(4, 2));
  EXPECT_EQ(full({2}, 0.5, TensorOptions{DType::Bool}).to_vector<bool>(),
            std::vector<bool>(2, true));
  EXPECT_EQ(zeros({0, 5}).numel(), 0);
}

TEST(Factories, LargeFillIsComplete) {
  // Bigger than one parallel grain, so every chunk must be written.
  Tensor t = full({300000}, 7.0, TensorOptions{DType::Int64});
  auto v = t.to_vector<int64_t>();
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 7; }));
}

TEST(Factories, RequiresGradMakesLeaf) {
  Tensor t = zeros({2}, TensorOptions{}.with_requires_grad(true));
  EXPECT_TRUE(t.requires_grad());
  EXPECT_TRUE(t.is_leaf());
  EXPECT_FALSE(ones({2}).requires_grad());
  expect_error([] { zeros({2}, TensorOptions{DType::Int64}.with_requires_grad(true)); },
               {"[requires_grad_]", "int64[2]"});
}

TEST(Factories, ScalarTensor) {
  Tensor s = scalar_tensor(3.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.dtype(), DType::Float32);
  EXPECT_EQ(s.item(), 3.5);
  EXPECT_EQ(scalar_tensor(4, TensorOptions{DType::Int64}).item<int64_t>(), 4);
}

TEST(Factories, LikeCopiesShapeDtypeDevice) {
  Tensor base = ones({2, 3}, TensorOptions{DType::Float64}.with_requires_grad(true));
  Tensor z = zeros_like(base);
  EXPECT_EQ(z.shape(), base.shape());
  EXPECT_EQ(z.dtype(), DType::Float64);
  EXPECT_FALSE(z.requires_grad());
  EXPECT_EQ(values(z), std::vector<double>(6, 0.0));
  EXPECT_EQ(values(ones_like(base, DType::Int32)), std::vector<double>(6, 1.0));
  EXPECT_EQ(ones_like(base, DType::Int32).dtype(), DType::Int32);
  EXPECT_EQ(values(full_like(base, -2.0)), std::vector<double>(6, -2.0));
  Tensor e = empty_like(base, DType::Float16);
  EXPECT_EQ(e.shape(), base.shape());
  EXPECT_EQ(e.dtype(), DType::Float16);
  Tensor meta = empty({4, 1}, TensorOptions{}.with_device(kMeta));
  EXPECT_TRUE(zeros_like(meta).is_meta());
  EXPECT_EQ(full_like(meta, 3.0).shape(), (Shape{4, 1}));
}

TEST(Factories, MetaAllocatesNothing) {
  TensorOptions meta = TensorOptions{}.with_device(kMeta);
  Tensor z = zeros({1000, 1000}, meta);
  EXPECT_TRUE(z.is_meta());
  EXPECT_EQ(z.storage()->data(), nullptr);
  EXPECT_EQ(arange(0, 10, 1, meta).shape(), (Shape{10}));
  EXPECT_EQ(linspace(0, 1, 7, meta).shape(), (Shape{7}));
  EXPECT_EQ(eye(3, 4, meta).shape(), (Shape{3, 4}));
  EXPECT_EQ(tensor<float>({1, 2, 3, 4}, Shape{2, 2}, meta).shape(), (Shape{2, 2}));
  // Random factories on meta draw nothing: the generator does not move.
  Generator gen(5);
  EXPECT_EQ(rand({100}, meta, &gen).shape(), (Shape{100}));
  EXPECT_EQ(randint(0, 5, {10}, TensorOptions{DType::Int64, kMeta}, &gen).shape(), (Shape{10}));
  EXPECT_EQ(gen.offset(), 0u);
}

TEST(Factories, TensorFromValues) {
  Tensor a = tensor<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.dtype(), DType::Float32);
  EXPECT_EQ(values(a), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(tensor<double>({0.1, 0.2}).dtype(), DType::Float64);
  EXPECT_EQ(tensor<double>({0.1, 0.2}).shape(), (Shape{2}));
  EXPECT_EQ(tensor<int64_t>({1, -2}).to_vector<int64_t>(), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(tensor<int32_t>({7}).dtype(), DType::Int32);
  EXPECT_EQ(tensor<uint8_t>({255, 0}).to_vector<int64_t>(), (std::vector<int64_t>{255, 0}));
  Tensor b = tensor<bool>({true, false, true}, Shape{3, 1});
  EXPECT_EQ(b.dtype(), DType::Bool);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  // Conversion to the requested dtype.
  Tensor c = tensor<double>({1.7, -0.4, 0.0}, std::nullopt, TensorOptions{DType::Int32});
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(tensor<double>({0.5, 0.0}, std::nullopt, TensorOptions{DType::Bool}).to_vector<bool>(),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(values(tensor<int64_t>({3}, Shape{}, TensorOptions{DType::Float16})),
            (std::vector<double>{3}));
  Tensor s = tensor<double>({2.5}, Shape{});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 2.5);
  Tensor g = tensor<float>({1, 2}, std::nullopt, TensorOptions{}.with_requires_grad(true));
  EXPECT_TRUE(g.requires_grad());
  EXPECT_EQ(tensor<float>({}).shape(), (Shape{0}));
}

TEST(Factories, TensorInitializerListIsFloat32) {
  Tensor t = tensor({1.5, 2.5, -1});
  EXPECT_EQ(t.dtype(), DType::Float32);
  EXPECT_EQ(values(t), (std::vector<double>{1.5, 2.5, -1}));
  EXPECT_EQ(tensor({1, 2}, TensorOptions{DType::Int64}).dtype(), DType::Int64);
}

TEST(Factories, TensorCountMismatchNamesShapeAndCaller) {
  expect_error(
      [] {
        tensor<float>({1, 2, 3, 4, 5}, Shape{2, 3});
      },
      {"[tensor] expected 6 values for shape [2, 3], but got 5", "test_factories.cpp"});
  expect_error([] { tensor<float>({1, 2}, Shape{-1, 2}); }, {"[tensor]", "[-1, 2]"});
}

TEST(Factories, ArangeDtypeAndValues) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5.5).dtype(), DType::Float32);
  EXPECT_EQ(values(arange(5.5)), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(arange(0, -3, -1).to_vector<int64_t>(), (std::vector<int64_t>{0, -1, -2}));
  EXPECT_EQ(arange(2, 2).numel(), 0);
  // Bit-exact against torch.arange(0, 1, 0.1) (float32) and torch.arange(-1, 1.1, 0.25).
  EXPECT_EQ(arange(0, 1, 0.1).to_vector<float>(),
            (std::vector<float>{0x0p+0f, 0x1.99999ap-4f, 0x1.99999ap-3f, 0x1.333334p-2f,
                                0x1.99999ap-2f, 0x1p-1f, 0x1.333334p-1f, 0x1.666666p-1f,
                                0x1.99999ap-1f, 0x1.ccccccp-1f}));
  EXPECT_EQ(values(arange(-1, 1.1, 0.25)),
            (std::vector<double>{-1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(values(arange(1, 0, -0.3)).size(), 4u);
  Tensor d = arange(0, 3, 1, TensorOptions{DType::Float64});
  EXPECT_EQ(d.dtype(), DType::Float64);
  EXPECT_EQ(values(d), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(values(arange(0.5, 3, 1, TensorOptions{DType::Float16})),
            (std::vector<double>{0.5, 1.5, 2.5}));
}

TEST(Factories, ArangeIntegerDtypesTruncateLikePyTorch) {
  // torch.arange(0, 5.5, 1, dtype=torch.int64) has 5 elements (length from truncated bounds);
  // int32 computes the length from the doubles.
  EXPECT_EQ(arange(0, 5.5, 1, TensorOptions{DType::Int64}).numel(), 5);
  EXPECT_EQ(arange(-2.5, 2, 1, TensorOptions{DType::Int64}).to_vector<int64_t>(),
            (std::vector<int64_t>{-2, -1, 0, 1}));
  EXPECT_EQ(arange(-2.5, 2, 1, TensorOptions{DType::Int32}).to_vector<int64_t>(),
            (std::vector<int64_t>{-2, -1, 0, 1, 2}));
  EXPECT_EQ(arange(0.5, 3, 1, TensorOptions{DType::Int32}).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, 2}));
}

TEST(Factories, ArangeErrors) {
  expect_error([] { arange(0, 1, 0); }, {"[arange]", "nonzero step", "test_factories.cpp"});
  expect_error([] { arange(0, -1, 1); }, {"[arange]", "end=-1", "step=1", "test_factories.cpp"});
  expect_error([] { arange(3, 5, -1); }, {"[arange]", "start=3"});
  expect_error([] { arange(0, INFINITY); }, {"[arange]", "inf"});
  // A step that truncates to zero for an integer dtype (PyTorch: "step must be nonzero").
  expect_error([] { arange(0, 3, 0.5, TensorOptions{DType::Int64}); },
               {"[arange]", "nonzero step", "int64"});
  expect_error([] { arange(0, 3, 1, TensorOptions{DType::Bool}); }, {"[arange]", "bool"});
}

TEST(Factories, LinspaceMatchesPyTorch) {
  // Bit-exact against torch.linspace(-3.3, 7.7, 13) (float32), whose 13 elements all take
  // PyTorch's scalar path (see Note [fused multiply-add in ranges]).
  EXPECT_EQ(linspace(-3.3, 7.7, 13).to_vector<float>(),
            (std::vector<float>{-0x1.a66666p+1f, -0x1.31111p+1f, -0x1.777776p+0f, -0x1.199996p-1f,
                                0x1.77778p-2f, 0x1.48888cp+0f, 0x1.199998p+1f, 0x1.8eeeecp+1f,
                                0x1.02222p+2f, 0x1.3cccccp+2f, 0x1.777776p+2f, 0x1.b22222p+2f,
                                0x1.ecccccp+2f}));
  // torch.linspace(0, 1, 11): the endpoint is exactly 1.
  EXPECT_EQ(linspace(0, 1, 11).to_vector<float>(),
            (std::vector<float>{0x0p+0f, 0x1.99999ap-4f, 0x1.99999ap-3f, 0x1.333334p-2f,
                                0x1.99999ap-2f, 0x1p-1f, 0x1.333334p-1f, 0x1.666666p-1f,
                                0x1.99999ap-1f, 0x1.ccccccp-1f, 0x1p+0f}));
  // torch.linspace(-3.3, 7.7, 13, dtype=torch.float64); PyTorch's vectorized chunks may differ
  // in the last bit, the endpoints never do.
  std::vector<double> expected{-0x1.a666666666666p+1, -0x1.3111111111111p+1, -0x1.7777777777777p+0,
                               -0x1.1999999999998p-1, 0x1.7777777777778p-2,  0x1.4888888888888p+0,
                               0x1.199999999999ap+1,  0x1.8eeeeeeeeeeefp+1,  0x1.0222222222222p+2,
                               0x1.3cccccccccccdp+2,  0x1.7777777777778p+2,  0x1.b222222222222p+2,
                               0x1.ecccccccccccdp+2};
  auto got = values(linspace(-3.3, 7.7, 13, TensorOptions{DType::Float64}));
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-15) << i;
  EXPECT_EQ(got.front(), -3.3);
  EXPECT_EQ(got.back(), 7.7);
}

TEST(Factories, LinspaceEdgeCases) {
  EXPECT_EQ(values(linspace(3, 4, 1)), (std::vector<double>{3}));
  EXPECT_EQ(linspace(3, 4, 0).numel(), 0);
  EXPECT_EQ(values(linspace(0, 1, 5)), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(values(linspace(1, 0, 3)), (std::vector<double>{1, 0.5, 0}));
  // Integers: the step is a double and each value truncates (torch gives these).
  EXPECT_EQ(linspace(-1, 10, 7, TensorOptions{DType::Int32}).to_vector<int64_t>(),
            (std::vector<int64_t>{-1, 0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(linspace(10, 0, 4, TensorOptions{DType::Int64}).to_vector<int64_t>(),
            (std::vector<int64_t>{10, 6, 3, 0}));
  EXPECT_EQ(linspace(0.5, 3.5, 4, TensorOptions{DType::Int64}).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, 2, 3}));
  expect_error([] { linspace(0, 1, -1); }, {"[linspace]", "steps=-1", "test_factories.cpp"});
}

TEST(Factories, Eye) {
  EXPECT_EQ(values(eye(3)), (std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  Tensor r = eye(2, 3, TensorOptions{DType::Int64});
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.dtype(), DType::Int64);
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(values(eye(3, 2)), (std::vector<double>{1, 0, 0, 1, 0, 0}));
  EXPECT_EQ(eye(0).shape(), (Shape{0, 0}));
  expect_error([] { eye(-1); }, {"[eye]", "n=-1"});
}

TEST(Factories, RandInUnitIntervalForEveryFloatDtype) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor t = rand({5000}, TensorOptions{dt});
    EXPECT_EQ(t.dtype(), dt);
    auto v = values(t);
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x >= 0 && x < 1; }))
        << dtype_name(dt);
    double mean = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    EXPECT_NEAR(mean, 0.5, 0.03) << dtype_name(dt);
    EXPECT_GT(std::set<double>(v.begin(), v.end()).size(), 100u);
  }
}

TEST(Factories, RandIsDeterministicWithSeed) {
  manual_seed(1234);
  auto a = values(rand({64}));
  auto b = values(rand({64}));
  manual_seed(1234);
  EXPECT_EQ(values(rand({64})), a);
  EXPECT_EQ(values(rand({64})), b);
  EXPECT_NE(a, b);
  Generator g1(7), g2(7), g3(8);
  EXPECT_EQ(values(randn({33}, {}, &g1)), values(randn({33}, {}, &g2)));
  Generator g4(7);
  EXPECT_NE(values(randn({33}, {}, &g4)), values(randn({33}, {}, &g3)));
  Generator h1(9), h2(9);
  EXPECT_EQ(values(rand({10}, TensorOptions{DType::Float64}, &h1)),
            values(rand({10}, TensorOptions{DType::Float64}, &h2)));
}

TEST(Factories, RandnMoments) {
  Generator g(42);
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    auto v = values(randn({20000}, TensorOptions{dt}, &g));
    double mean = 0, sq = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    for (double x : v) sq += (x - mean) * (x - mean);
    double stddev = std::sqrt(sq / static_cast<double>(v.size()));
    EXPECT_NEAR(mean, 0.0, 0.03) << dtype_name(dt);
    EXPECT_NEAR(stddev, 1.0, 0.03) << dtype_name(dt);
  }
}

TEST(Factories, RandRejectsIntegerDtypes) {
  expect_error([] { rand({2}, TensorOptions{DType::Int64}); }, {"[rand]", "int64"});
  expect_error([] { randn({2}, TensorOptions{DType::Bool}); }, {"[randn]", "bool"});
}

TEST(Factories, RandLike) {
  Tensor base = zeros({3, 4}, TensorOptions{DType::Float64});
  Generator g(3);
  Tensor r = rand_like(base, &g);
  EXPECT_EQ(r.shape(), base.shape());
  EXPECT_EQ(r.dtype(), DType::Float64);
  Tensor n = randn_like(base, &g);
  EXPECT_EQ(n.shape(), base.shape());
  expect_error([] { rand_like(zeros({2}, TensorOptions{DType::Int32})); }, {"[rand_like]"});
}

TEST(Factories, RandintRangeAndDtypes) {
  Generator g(11);
  Tensor t = randint(-3, 4, {2000}, TensorOptions{DType::Int64}, &g);
  EXPECT_EQ(t.dtype(), DType::Int64);
  auto v = t.to_vector<int64_t>();
  std::set<int64_t> seen(v.begin(), v.end());
  EXPECT_EQ(seen, (std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3}));
  for (DType dt : {DType::Int32, DType::UInt8, DType::Float32, DType::Float16}) {
    Tensor u = randint(0, 10, {500}, TensorOptions{dt}, &g);
    EXPECT_EQ(u.dtype(), dt);
    auto w = u.to_vector<double>();
    EXPECT_TRUE(std::all_of(w.begin(), w.end(),
                            [](double x) { return x >= 0 && x < 10 && x == std::floor(x); }));
  }
  EXPECT_EQ(randint(5, 6, {4}).to_vector<int64_t>(), (std::vector<int64_t>(4, 5)));
  Generator a(99), b(99);
  EXPECT_EQ(randint(0, 1000, {50}, {DType::Int64}, &a).to_vector<int64_t>(),
            randint(0, 1000, {50}, {DType::Int64}, &b).to_vector<int64_t>());
  // A range wider than 2^32 takes the 64-bit path.
  Tensor wide = randint(-(int64_t{1} << 40), int64_t{1} << 40, {100}, {DType::Int64}, &g);
  auto x = wide.to_vector<int64_t>();
  EXPECT_TRUE(std::all_of(x.begin(), x.end(), [](int64_t y) {
    return y >= -(int64_t{1} << 40) && y < (int64_t{1} << 40);
  }));
  expect_error([] { randint(3, 3, {2}); }, {"[randint]", "low=3", "high=3", "test_factories.cpp"});
}

}  // namespace
}  // namespace kiln
