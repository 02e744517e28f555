// Note [conv winograd]: batched no-grad 3x3 convolutions run oneDNN's Winograd kernel, whose
// rounding differs from the direct kernel's. This proves the bound: against a float64 reference,
// the largest error stays under 1e-5 of the largest output, for plain convolutions and for
// conv2d_affine's fused epilogue. And it checks which kernel runs when.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kiln/backend/onednn/conv_kernels.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

const Conv2dOptions kSame{.padding = 1};

// The kernel ConvAlgorithm::kAuto runs for a call of this purpose (Note [conv algorithm]).
std::string implementation(const Tensor& x, const Tensor& w, const Conv2dOptions& o,
                           detail::ConvPurpose purpose = detail::ConvPurpose::kInference) {
  return detail::conv_forward_implementation(*detail::conv_geometry(x.shape(), w.shape(), o),
                                             {o.algorithm, purpose}, x, false);
}

// max |got - want| / max |want|, with want in float64.
double error_to_max(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  double err = 0.0, top = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    top = std::max(top, std::fabs(b[i]));
  }
  return err / top;
}

bool is_winograd(const std::string& implementation) {
  return implementation.find("wino") != std::string::npos;
}

// oneDNN 2.6 has Winograd kernels for AVX-512 CPUs only; on others a Winograd request runs the
// direct kernel (Note [conv winograd]), and these tests check that instead.
bool winograd_available() {
  static const bool available =
      is_winograd(implementation(randn({4, 16, 8, 8}), randn({16, 16, 3, 3}),
                                 {.padding = 1, .algorithm = ConvAlgorithm::kWinograd}));
  return available;
}

TEST(ConvWinograd, DirectAndWinogradAgreeWithFloat64) {
  struct Case {
    Shape x;
    int64_t out;
  };
  for (const Case& c : std::vector<Case>{{{4, 16, 8, 8}, 32}, {{1, 32, 10, 10}, 16}}) {
    SCOPED_TRACE(shape_str(c.x));
    manual_seed(54);
    const int64_t channels = c.x[1];
    Tensor x = relu(randn(c.x));
    Tensor w = mul(randn({c.out, channels, 3, 3}), std::sqrt(2.0 / (9.0 * channels)));
    Tensor b = randn({c.out});
    NoGradGuard no_grad;
    const Tensor want = conv2d(to_dtype(x, DType::Float64), to_dtype(w, DType::Float64),
                               to_dtype(b, DType::Float64), {.padding = 1});
    for (ConvAlgorithm a : {ConvAlgorithm::kDirect, ConvAlgorithm::kWinograd}) {
      SCOPED_TRACE(detail::conv_algorithm_name(a));
      const Conv2dOptions o{.padding = 1, .algorithm = a};
      const std::string impl = implementation(x, w, o, detail::ConvPurpose::kInference);
      EXPECT_EQ(is_winograd(impl), a == ConvAlgorithm::kWinograd && winograd_available()) << impl;
      EXPECT_LT(error_to_max(conv2d(x, w, b, o), want), 1e-5);
    }
  }
}

TEST(ConvWinograd, DirectNeverWinogradAndWinogradFallsBackWhereOneDnnHasNone) {
  const Tensor x = randn({4, 16, 8, 8}), w = randn({16, 16, 3, 3});
  const Conv2dOptions direct{.padding = 1, .algorithm = ConvAlgorithm::kDirect};
  const Conv2dOptions winograd{.padding = 1, .algorithm = ConvAlgorithm::kWinograd};
  for (detail::ConvPurpose p : {detail::ConvPurpose::kTraining, detail::ConvPurpose::kInference}) {
    SCOPED_TRACE(detail::conv_purpose_name(p));
    EXPECT_FALSE(is_winograd(implementation(x, w, direct, p)));
    // Requested, Winograd runs for training too (kAuto keeps training direct).
    EXPECT_EQ(is_winograd(implementation(x, w, winograd, p)), winograd_available());
    EXPECT_EQ(is_winograd(implementation(x, w, {.padding = 1}, p)),
              p == detail::ConvPurpose::kInference && winograd_available());
  }
  // Stride 2 has no Winograd kernel: the direct kernel runs, as for kDirect.
  Conv2dOptions strided = winograd;
  strided.stride = 2;
  EXPECT_FALSE(is_winograd(implementation(x, w, strided, detail::ConvPurpose::kInference)));
  Tensor want, got;
  {
    NoGradGuard no_grad;
    Conv2dOptions o = strided;
    o.algorithm = ConvAlgorithm::kDirect;
    want = conv2d(x, w, Tensor(), o);
    got = conv2d(x, w, Tensor(), strided);
  }
  test::expect_bit_identical(got, want);
  // A Winograd forward recorded for a gradient: the gradients are the usual backward ops.
  Tensor xr = x.detach();
  xr.set_requires_grad(true);
  Tensor y = conv2d(xr, w, Tensor(), winograd);
  y.sum().backward();
  ASSERT_TRUE(xr.grad().defined());
  EXPECT_EQ(xr.grad().shape(), x.shape());
}

TEST(ConvWinograd, AutoChoosesItForBatchedInference3x3Only) {
  const Tensor x = randn({4, 16, 8, 8}), w = randn({16, 16, 3, 3});
  EXPECT_EQ(is_winograd(implementation(x, w, kSame)), winograd_available())
      << implementation(x, w, kSame);
  EXPECT_EQ(implementation(randn({1, 16, 8, 8}), w, kSame).find("wino"), std::string::npos);
  EXPECT_EQ(implementation(x, w, {.stride = 2, .padding = 1}).find("wino"), std::string::npos);
  EXPECT_EQ(implementation(randn({4, 3, 8, 8}), randn({16, 3, 3, 3}), kSame).find("wino"),
            std::string::npos);
  EXPECT_EQ(implementation(x, randn({16, 16, 1, 1}), {}).find("wino"), std::string::npos);
  EXPECT_EQ(implementation(x, w, kSame, detail::ConvPurpose::kTraining).find("wino"),
            std::string::npos);
}

Tensor f64(const Tensor& t) {
  return to_dtype(t, DType::Float64);
}

struct Case {
  Shape x;
  int64_t out;
};

TEST(ConvWinograd, ErrorAgainstFloat64WithinBound) {
  for (const Case& c : std::vector<Case>{{{4, 16, 8, 8}, 16},
                                         {{4, 64, 16, 16}, 64},
                                         {{2, 128, 8, 8}, 128},
                                         {{2, 256, 4, 4}, 256}}) {
    SCOPED_TRACE(shape_str(c.x));
    manual_seed(41);
    // Activations after a relu, weights with He scaling: the magnitudes of a trained network.
    const int64_t channels = c.x[1];
    Tensor x = relu(randn(c.x));
    Tensor w = mul(randn({c.out, channels, 3, 3}), std::sqrt(2.0 / (9.0 * channels)));
    Tensor scale = add(rand({c.out}), 0.5), shift = randn({c.out});
    Tensor residual = randn({c.x[0], c.out, c.x[2], c.x[3]});
    NoGradGuard no_grad;
    ASSERT_EQ(is_winograd(implementation(x, w, kSame)), winograd_available());
    const Tensor want = conv2d(f64(x), f64(w), Tensor(), kSame);
    EXPECT_LT(error_to_max(conv2d(x, w, Tensor(), kSame), want), 1e-5);
    const Tensor want_affine =
        relu(add(channel_affine(want, f64(scale), f64(shift)), f64(residual)));
    EXPECT_LT(error_to_max(conv2d_affine(x, w, scale, shift, residual, true, kSame), want_affine),
              1e-5);
  }
}

}  // namespace
}  // namespace kiln
