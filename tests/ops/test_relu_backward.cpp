#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/autograd/engine.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Selects like PyTorch's threshold_backward: x <= 0 gives 0 even for an infinite or NaN grad,
// and a NaN x passes the grad.
TEST(ReluBackward, SelectsLikePyTorch) {
  Tensor g = tensor<float>({1, 2, kInf, kNaN, 5, 6, 7});
  Tensor x = tensor<float>({-1, 0, -3, 0, kNaN, 1e-30f, 2});
  std::vector<float> got = relu_backward(g, x).to_vector<float>();
  const std::vector<float> want{0, 0, 0, 0, 5, 6, 7};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
}

TEST(ReluBackward, IsReluGradientOnStridedInputs) {
  manual_seed(5);
  Tensor x = randn({6, 5}).t();  // non-contiguous
  Tensor leaf = x.detach();
  leaf.set_requires_grad(true);
  Tensor g = randn({5, 6});
  Tensor got = grad({sum(mul(relu(leaf), g))}, {leaf})[0];
  Tensor want = mul(g, to_dtype(gt(x, 0.0), DType::Float32));
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
}

TEST(ReluBackward, Errors) {
  try {
    relu_backward(ones({2, 3}), ones({3, 2}));
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part : {"[relu_backward]", "[2, 3]", "[3, 2]", "test_relu_backward.cpp"})
      EXPECT_NE(what.find(part), std::string::npos) << what;
  }
  EXPECT_THROW(relu_backward(ones({2}, {DType::Int64}), ones({2}, {DType::Int64})), Error);
  EXPECT_THROW(relu_backward(ones({2}), ones({2}, {DType::Float64})), Error);
}

}  // namespace
}  // namespace kiln
