// Expected strings are PyTorch 1.13's repr of the same tensor (with "dtype=torch.float64" spelled
// "dtype=float64"), produced by /usr/bin/python3 -c "import torch; print(repr(...))".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {
namespace {

// Builds a contiguous tensor with core only (the factories live in the ops layer).
template <class T, class V>
Tensor make(const std::vector<V>& values, Shape shape) {
  Tensor t = empty(std::move(shape), TensorOptions{dtype_of<T>()});
  T* p = static_cast<T*>(t.raw_data());
  for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  return t;
}

Tensor f32(const std::vector<double>& v, Shape shape) {
  return make<float>(v, std::move(shape));
}
Tensor f32(const std::vector<double>& v) {
  return f32(v, {static_cast<int64_t>(v.size())});
}
Tensor i64(const std::vector<int64_t>& v, Shape shape) {
  return make<int64_t>(v, std::move(shape));
}

std::vector<double> iota_d(int64_t n, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i) * scale;
  return v;
}
std::vector<int64_t> iota_i(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Print, FloatMatrixAlignsColumns) {
  EXPECT_EQ(f32({0.1, -1.2, 3, 4}, {2, 2}).to_string(),
            "tensor([[ 0.1000, -1.2000],\n        [ 3.0000,  4.0000]])");
}

TEST(Print, Integers) {
  EXPECT_EQ(i64({1, -20, 300, 4}, {2, 2}).to_string(), "tensor([[  1, -20],\n        [300,   4]])");
  EXPECT_EQ(make<int32_t>(std::vector<int>{1, 2}, {2}).to_string(), "tensor([1, 2], dtype=int32)");
  EXPECT_EQ(make<uint8_t>(std::vector<int>{1, 200}, {2}).to_string(),
            "tensor([  1, 200], dtype=uint8)");
  EXPECT_EQ(make<int8_t>(std::vector<int>{-7}, {}).to_string(), "tensor(-7, dtype=int8)");
}

TEST(Print, Bool) {
  EXPECT_EQ(make<bool>(std::vector<int>{1, 0, 1}, {3}).to_string(),
            "tensor([ True, False,  True])");
  EXPECT_EQ(make<bool>(std::vector<int>{1, 0}, {1, 2}).to_string(), "tensor([[ True, False]])");
}

TEST(Print, ZeroDim) {
  EXPECT_EQ(f32({3.5}, {}).to_string(), "tensor(3.5000)");
  EXPECT_EQ(i64({7}, {}).to_string(), "tensor(7)");
  EXPECT_EQ(make<double>(std::vector<double>{2.0}, {}).to_string(), "tensor(2., dtype=float64)");
}

TEST(Print, Empty) {
  EXPECT_EQ(empty({0, 3}).to_string(), "tensor([], size=(0, 3))");
  EXPECT_EQ(empty({0}).to_string(), "tensor([])");
  // No element shows that it is an integer tensor, so even int64 is named.
  EXPECT_EQ(empty({0}, TensorOptions{DType::Int64}).to_string(), "tensor([], dtype=int64)");
  EXPECT_EQ(empty({2, 0}, TensorOptions{DType::Float64}).to_string(),
            "tensor([], size=(2, 0), dtype=float64)");
}

TEST(Print, IntegralFloatsUseIntMode) {
  EXPECT_EQ(f32({1, 2, -3}).to_string(), "tensor([ 1.,  2., -3.])");
  EXPECT_EQ(f32({0, 0, 0}).to_string(), "tensor([0., 0., 0.])");
  EXPECT_EQ(f32({0, 0, kNaN}).to_string(), "tensor([0., 0., nan])");
  EXPECT_EQ(f32({-kInf, 1e5}).to_string(), "tensor([   -inf, 100000.])");
}

TEST(Print, ScientificNotation) {
  EXPECT_EQ(f32({1e-5, 1.0}).to_string(), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(f32({1e9, 1.0}).to_string(), "tensor([1.0000e+09, 1.0000e+00])");
  EXPECT_EQ(f32({1, 1e5}).to_string(), "tensor([1.0000e+00, 1.0000e+05])");
  EXPECT_EQ(f32({0.5, 1.5, 2.5, 0.00005}).to_string(),
            "tensor([5.0000e-01, 1.5000e+00, 2.5000e+00, 5.0000e-05])");
  EXPECT_EQ(f32({123456789.0, 1.5}).to_string(), "tensor([1.2346e+08, 1.5000e+00])");
  EXPECT_EQ(f32({1, -2, 1e8}).to_string(), "tensor([ 1.0000e+00, -2.0000e+00,  1.0000e+08])");
  EXPECT_EQ(f32({1e-8, 1e10, kNaN, 0}, {2, 2}).to_string(),
            "tensor([[1.0000e-08, 1.0000e+10],\n        [       nan, 0.0000e+00]])");
  // The ratio 0.12345 / 0.00015 stays below 1000 and the minimum above 1e-4: fixed notation.
  EXPECT_EQ(f32({0.12345, 0.00015}).to_string(), "tensor([0.1235, 0.0002])");
}

TEST(Print, NanAndInf) {
  EXPECT_EQ(f32({kNaN, kInf, -kInf, 1.5}).to_string(), "tensor([   nan,    inf,   -inf, 1.5000])");
  EXPECT_EQ(f32({kNaN, kInf, 2}).to_string(), "tensor([nan, inf, 2.])");
  EXPECT_EQ(f32({-kNaN, 0.5}).to_string(), "tensor([   nan, 0.5000])");
  EXPECT_EQ(f32({-0.0, 1.5}).to_string(), "tensor([-0.0000, 1.5000])");
}

TEST(Print, DtypeSuffix) {
  EXPECT_EQ(make<double>(std::vector<double>{1.25, 2.5}, {2}).to_string(),
            "tensor([1.2500, 2.5000], dtype=float64)");
  EXPECT_EQ(make<Half>(std::vector<float>{0.1f, 2.0f}, {2}).to_string(),
            "tensor([0.1000, 2.0000], dtype=float16)");
  EXPECT_EQ(make<BFloat16>(std::vector<float>{0.1f, 2.0f}, {2}).to_string(),
            "tensor([0.1001, 2.0000], dtype=bfloat16)");
}

TEST(Print, RequiresGrad) {
  Tensor t = f32({1.5, 2.0});
  t.set_requires_grad(true);
  EXPECT_EQ(t.to_string(), "tensor([1.5000, 2.0000], requires_grad=True)");
}

TEST(Print, LongRowsWrapAtLineWidth) {
  EXPECT_EQ(i64(iota_i(30), {30}).to_string(),
            "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
            "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
  EXPECT_EQ(f32(iota_d(30, 1.0 / 7.0)).to_string(),
            "tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429,\n"
            "        1.2857, 1.4286, 1.5714, 1.7143, 1.8571, 2.0000, 2.1429, 2.2857, 2.4286,\n"
            "        2.5714, 2.7143, 2.8571, 3.0000, 3.1429, 3.2857, 3.4286, 3.5714, 3.7143,\n"
            "        3.8571, 4.0000, 4.1429])");
}

TEST(Print, SuffixesWrapAtLineWidth) {
  Tensor t = make<double>(iota_d(9, 1.0 / 3.0), {9});
  t.set_requires_grad(true);
  EXPECT_EQ(t.to_string(),
            "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667],\n"
            "       dtype=float64, requires_grad=True)");
  // Short enough for the suffix to stay on the line (PyTorch's longer "torch.float64" wraps).
  EXPECT_EQ(make<double>(iota_d(7, 1.0 / 3.0), {7}).to_string(),
            "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000], dtype=float64)");
}

TEST(Print, ThreeDims) {
  EXPECT_EQ(i64(iota_i(12), {2, 2, 3}).to_string(),
            "tensor([[[ 0,  1,  2],\n         [ 3,  4,  5]],\n\n"
            "        [[ 6,  7,  8],\n         [ 9, 10, 11]]])");
}

TEST(Print, NonContiguousViewPrintsLogicalOrder) {
  Tensor base = f32(iota_d(6), {2, 3});
  Tensor transposed = make_view(base, {3, 2}, {1, 3}, 0);
  EXPECT_EQ(transposed.to_string(), "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]])");
  Tensor column = make_view(base, {2}, {3}, 1);  // base[:, 1]
  EXPECT_EQ(column.to_string(), "tensor([1., 4.])");
}

TEST(Print, SummarizesAboveThreshold) {
  EXPECT_EQ(i64(iota_i(2000), {2000}).to_string(),
            "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_EQ(make<bool>(std::vector<int>(1001, 1), {1001}).to_string(),
            "tensor([True, True, True,  ..., True, True, True])");
  EXPECT_EQ(f32(std::vector<double>(1001, 1.0), {1001, 1}).to_string(),
            "tensor([[1.],\n        [1.],\n        [1.],\n        ...,\n"
            "        [1.],\n        [1.],\n        [1.]])");
  // Exactly the threshold: printed in full.
  EXPECT_EQ(i64(iota_i(1000), {1000}).to_string().find("..."), std::string::npos);
}

TEST(Print, SummarizedMatrixFormatsOnlyVisibleValues) {
  // The ratio 1999 / 1 of the visible values switches to scientific notation.
  EXPECT_EQ(f32(iota_d(2000), {40, 50}).to_string(),
            "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.7000e+01, 4.8000e+01,\n"
            "         4.9000e+01],\n"
            "        [5.0000e+01, 5.1000e+01, 5.2000e+01,  ..., 9.7000e+01, 9.8000e+01,\n"
            "         9.9000e+01],\n"
            "        [1.0000e+02, 1.0100e+02, 1.0200e+02,  ..., 1.4700e+02, 1.4800e+02,\n"
            "         1.4900e+02],\n"
            "        ...,\n"
            "        [1.8500e+03, 1.8510e+03, 1.8520e+03,  ..., 1.8970e+03, 1.8980e+03,\n"
            "         1.8990e+03],\n"
            "        [1.9000e+03, 1.9010e+03, 1.9020e+03,  ..., 1.9470e+03, 1.9480e+03,\n"
            "         1.9490e+03],\n"
            "        [1.9500e+03, 1.9510e+03, 1.9520e+03,  ..., 1.9970e+03, 1.9980e+03,\n"
            "         1.9990e+03]])");
}

TEST(Print, SummarizedThreeDims) {
  std::string s = i64(iota_i(1200), {10, 10, 12}).to_string();
  EXPECT_EQ(s.substr(0, 158),
            "tensor([[[   0,    1,    2,  ...,    9,   10,   11],\n"
            "         [  12,   13,   14,  ...,   21,   22,   23],\n"
            "         [  24,   25,   26,  ...,   33,   34,   35],");
  EXPECT_NE(s.find("  [ 108,  109,  110,  ...,  117,  118,  119]],\n\n        [[ 120,"),
            std::string::npos);
  EXPECT_NE(s.find("]],\n\n        ...,\n\n        [[ 840,  841,"), std::string::npos);
  EXPECT_EQ(s.substr(s.size() - 55), "\n         [1188, 1189, 1190,  ..., 1197, 1198, 1199]]])");
}

TEST(Print, Meta) {
  EXPECT_EQ(empty({2, 3}, TensorOptions{}.with_device(kMeta)).to_string(),
            "tensor(..., device='meta', size=(2, 3))");
  EXPECT_EQ(empty({2}, TensorOptions{DType::Int64, kMeta}).to_string(),
            "tensor(..., device='meta', size=(2,), dtype=int64)");
  EXPECT_EQ(empty({}, TensorOptions{}.with_device(kMeta)).to_string(),
            "tensor(..., device='meta', size=())");
}

TEST(Print, StreamOperatorAndUndefined) {
  std::ostringstream os;
  os << f32({3.5}, {});
  EXPECT_EQ(os.str(), "tensor(3.5000)");
  EXPECT_EQ(Tensor().to_string(), "tensor(undefined)");
}

}  // namespace
}  // namespace kiln
