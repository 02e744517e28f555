// Tensor semantics that span core and ops: views share storage, copies do not, type promotion,
// meta tensors, item() and conversions.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::error_of;

TEST(Views, ShareStorageAndSeeWrites) {
  Tensor x = arange(12.0, TensorOptions{DType::Float32}).reshape({3, 4});
  Tensor t = x.t();
  Tensor row = x.select(0, 1);
  Tensor cols = slice(x, 1, 1, 4, 2);
  Tensor e = x.narrow(0, 0, 1).expand({5, 4});
  for (const Tensor& v : {t, row, cols, e}) {
    EXPECT_EQ(v.storage(), x.storage());
    EXPECT_TRUE(v.is_view());
  }
  EXPECT_EQ(t.strides(), (Strides{1, 4}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(cols.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(e.strides(), (Strides{0, 1}));
  x.add_(1.0);
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(t.to_vector<float>()[1], 5.0f);
}

TEST(Views, ReshapeViewsWhenPossibleAndCopiesOtherwise) {
  Tensor x = zeros({2, 3, 4});
  EXPECT_EQ(x.reshape({6, 4}).storage(), x.storage());
  Tensor t = x.transpose(0, 1);  // [3, 2, 4] with strides [4, 12, 1]
  EXPECT_EQ(t.reshape({3, 2, 2, 2}).storage(), x.storage()) << "splitting a dim is a view";
  EXPECT_NE(t.reshape({3, 8}).storage(), x.storage()) << "merging dims 1, 2 needs a copy";
  EXPECT_NE(t.reshape({24}).storage(), x.storage());
  std::string msg = error_of([&] { t.view({24}); });
  EXPECT_NE(msg.find("[view]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use reshape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_tensor_basics.cpp"), std::string::npos) << msg;
}

TEST(Views, SqueezeUnsqueezeFlattenShapes) {
  Tensor x = zeros({2, 1, 3, 1});
  EXPECT_EQ(x.squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{2, 1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 1, 3, 1, 1}));
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(scalar_tensor(2.0).flatten().shape(), (Shape{1}));
}

TEST(Views, InvalidShapesNameTheOpAndLine) {
  Tensor x = zeros({2, 3});
  std::string msg = error_of([&] { x.reshape({4, -1}); });
  EXPECT_NE(msg.find("[reshape] shape [4, -1] is invalid for input float32[2, 3]"),
            std::string::npos)
      << msg;
  msg = error_of([&] { x.expand({3, 3}); });
  EXPECT_NE(msg.find("[expand]"), std::string::npos) << msg;
  msg = error_of([&] { x.permute({0, 0}); });
  EXPECT_NE(msg.find("[permute] expected a permutation"), std::string::npos) << msg;
  msg = error_of([&] { x.select(1, 3); });
  EXPECT_NE(msg.find("[select] expected an index in [-3, 3)"), std::string::npos) << msg;
  msg = error_of([&] { x.narrow(1, 2, 2); });
  EXPECT_NE(msg.find("[narrow]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_tensor_basics.cpp"), std::string::npos) << msg;
}

TEST(Copies, CloneAndContiguousDoNotShare) {
  Tensor x = ones({2, 3});
  Tensor c = x.clone();
  EXPECT_NE(c.storage(), x.storage());
  EXPECT_EQ(x.contiguous().storage(), x.storage());
  Tensor tc = x.t().contiguous();
  EXPECT_NE(tc.storage(), x.storage());
  EXPECT_TRUE(tc.is_contiguous());
}

TEST(Copies, DetachSharesStorageWithoutHistory) {
  Tensor x = ones({3}).set_requires_grad(true);
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  EXPECT_EQ(d.storage(), y.storage());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
}

TEST(Conversion, ToDtypeRoundsLikePyTorch) {
  Tensor x = tensor<double>({1.5, -2.7, 3.9999, 1e10});
  EXPECT_EQ(x.to(DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3, 10000000000}));
  EXPECT_EQ(x.to(DType::Float16).to_vector<double>()[1], -2.69921875);  // torch: -2.6992
  EXPECT_EQ(x.to(DType::BFloat16).to_vector<double>()[0], 1.5);
  EXPECT_EQ(tensor<double>({0.0, 2.0}).to(DType::Bool).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1}));
}

TEST(Conversion, HalfArithmeticComputesInFloat32) {
  Tensor a = full({4}, 1000.0, {DType::Float16});
  Tensor b = full({4}, 0.2, {DType::Float16});
  Tensor c = add(a, b);
  EXPECT_EQ(c.dtype(), DType::Float16);
  EXPECT_EQ(c.to_vector<double>()[0], 1000.0);  // 1000.2 rounds to 1000 in float16
  EXPECT_EQ(mul(a, b).dtype(), DType::Float16);
  EXPECT_EQ(add(a, full({4}, 1.0, {DType::BFloat16})).dtype(), DType::Float32);
}

TEST(Promotion, ScalarsAndZeroDimTensorsFollowPyTorch) {
  Tensor i32 = ones({2}, {DType::Int32});
  EXPECT_EQ(add(i32, 2.5).dtype(), DType::Float32);
  EXPECT_EQ(add(i32, 2.0).dtype(), DType::Int32) << "integral numbers are integer scalars";
  EXPECT_EQ(add(i32, scalar_tensor(2.5, {DType::Float64})).dtype(), DType::Float64);
  EXPECT_EQ(add(ones({2}, {DType::Float16}), scalar_tensor(2.5, {DType::Float64})).dtype(),
            DType::Float16);
  EXPECT_EQ(add(ones({2}, {DType::UInt8}), scalar_tensor(2, {DType::Int64})).dtype(), DType::UInt8);
  EXPECT_EQ(add(ones({2}, {DType::Bool}), 2.0).dtype(), DType::Int64);
  EXPECT_EQ(mul(ones({2}), 2.0).dtype(), DType::Float32);
  EXPECT_EQ(div(i32, i32).dtype(), DType::Float32) << "true division";
  EXPECT_EQ(div(i32, i32).to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(Meta, OpsRunInferenceOnly) {
  Tensor a = empty({8, 3}, {DType::Float32, kMeta});
  Tensor b = empty({3, 5}, {DType::Float32, kMeta});
  Tensor c = relu(add(matmul(a, b), 1.0));
  EXPECT_TRUE(c.is_meta());
  EXPECT_EQ(c.shape(), (Shape{8, 5}));
  EXPECT_THROW(c.item(), Error);
  EXPECT_THROW(c.to_vector<float>(), Error);
  MemoryStats before = memory_stats();
  Tensor big = empty({1 << 20, 1 << 10}, {DType::Float32, kMeta});
  EXPECT_EQ(memory_stats().allocated_bytes, before.allocated_bytes) << "meta allocates nothing";
  EXPECT_EQ(sum(big, {1}).shape(), (Shape{1 << 20}));
}

TEST(Meta, MixingDevicesNamesBoth) {
  Tensor a = ones({2});
  Tensor b = empty({2}, {DType::Float32, kMeta});
  std::string msg = error_of([&] { add(a, b); });
  EXPECT_NE(msg.find("[add] expected all tensors on the same device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("on cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("on meta"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_tensor_basics.cpp"), std::string::npos) << msg;
}

TEST(Values, ItemAndErrors) {
  EXPECT_EQ(scalar_tensor(3.5).item(), 3.5);
  EXPECT_EQ(ones({1, 1}, {DType::Int64}).item<int64_t>(), 1);
  std::string msg = error_of([&] { ones({2, 3}).item(); });
  EXPECT_NE(msg.find("[item] expected a tensor with exactly one element, but got float32[2, 3]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("with 6 elements"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_tensor_basics.cpp"), std::string::npos) << msg;
  msg = error_of([&] { ones({2}).data<double>(); });
  EXPECT_NE(msg.find("[data] expected a tensor of dtype float64, but got float32[2] on cpu"),
            std::string::npos)
      << msg;
}

TEST(Threads, SetAndGet) {
  int before = get_num_threads();
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(before);
  EXPECT_EQ(get_num_threads(), before);
  EXPECT_THROW(set_num_threads(0), Error);
}

TEST(Threads, ResultsDoNotDependOnThreadCount) {
  int before = get_num_threads();
  manual_seed(7);
  Tensor x = randn({1 << 18});
  set_num_threads(1);
  std::vector<double> one = {sum(x).item(), exp(x).sum().item(), var(x).item()};
  set_num_threads(std::max(2, before));
  std::vector<double> many = {sum(x).item(), exp(x).sum().item(), var(x).item()};
  set_num_threads(before);
  EXPECT_EQ(one, many);
}

}  // namespace
}  // namespace kiln
