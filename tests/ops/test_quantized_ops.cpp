// The int8 ops against a float64 reference of the same quantized arithmetic (Note [int8
// quantization] in kiln/ops/quantize.h): exact equality where oneDNN's int8 kernels compute exact
// int32 sums (VNNI, AMX), and the errors bad operands get.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/quantize.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

Tensor ints(Shape shape, uint64_t seed, double lo, double hi, DType dtype) {
  return to_dtype(sample_tensor(std::move(shape), seed, lo < 0 ? lo - 0.999 : lo, hi + 0.999),
                  dtype);
}

Tensor scales(int64_t n, uint64_t seed) {
  return to_dtype(sample_tensor({n}, seed, 1e-4, 3e-3), DType::Float32);
}

// relu?((float(acc) + float(bias)) * scale) with acc the exact integer sum, computed in float64
// (exact below 2^53) and rounded to float32 once, as the kernels do.
Tensor reference_epilogue(const Tensor& acc64, const Tensor& bias_q, const Tensor& scale,
                          const Shape& channel_shape, bool relu_after) {
  Tensor acc = to_dtype(acc64, DType::Float32);
  Tensor b = reshape(to_dtype(bias_q, DType::Float32), channel_shape);
  Tensor y = mul(add(acc, b), reshape(scale, channel_shape));
  return relu_after ? relu(y) : y;
}

void expect_equal_or_close(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  float max_abs = 0.0f;
  for (float v : w) max_abs = std::max(max_abs, std::abs(v));
  size_t differ = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (onednn_exact_int8())
      differ += g[i] != w[i];
    else
      // Halved weights (no VNNI): each product may lose half a weight step.
      EXPECT_NEAR(g[i], w[i], 0.02 * max_abs + 1e-6) << "element " << i;
  }
  EXPECT_EQ(differ, 0u) << "on " << onednn_cpu_isa() << ", of " << g.size();
}

struct ConvCase {
  Shape x, w;
  Conv2dOptions options;
  DType x_dtype;
  bool relu;
};

TEST(QuantizedOps, ConvEqualsTheExactIntegerArithmetic) {
  const std::vector<ConvCase> cases = {
      // The small CNN's second convolution and a ResNet block's, uint8 after relu.
      {{4, 32, 14, 14}, {64, 32, 3, 3}, {.padding = 1}, DType::UInt8, true},
      {{2, 64, 8, 8}, {64, 64, 3, 3}, {.padding = 1}, DType::UInt8, false},
      // Signed activations (oneDNN adds a compensation term), strides, a 1x1 projection, groups.
      {{3, 16, 9, 9}, {32, 16, 3, 3}, {.stride = 2, .padding = 1}, DType::Int8, true},
      {{2, 64, 8, 8}, {128, 64, 1, 1}, {.stride = 2}, DType::UInt8, false},
      {{2, 8, 6, 6}, {8, 4, 3, 3}, {.padding = 1, .groups = 2}, DType::Int8, false},
      // The first layer of a grayscale model: one input channel.
      {{5, 1, 28, 28}, {32, 1, 3, 3}, {.padding = 1}, DType::Int8, true},
  };
  uint64_t seed = 700;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const double lo = c.x_dtype == DType::UInt8 ? 0 : -127,
                 hi = c.x_dtype == DType::UInt8 ? 255 : 127;
    const Tensor x = ints(c.x, ++seed, lo, hi, c.x_dtype);
    const Tensor w = ints(c.w, ++seed, -127, 127, DType::Int8);
    const Tensor b = ints({c.w[0]}, ++seed, -30000, 30000, DType::Int32);
    const Tensor s = scales(c.w[0], ++seed);
    const Tensor got = quantized_conv2d(x, w, b, s, c.relu, c.options);
    EXPECT_TRUE(got.is_channels_last());
    const Tensor acc =
        conv2d(to_dtype(x, DType::Float64), to_dtype(w, DType::Float64), Tensor(), c.options);
    expect_equal_or_close(got, reference_epilogue(acc, b, s, {1, c.w[0], 1, 1}, c.relu));
  }
}

TEST(QuantizedOps, LinearEqualsTheExactIntegerArithmetic) {
  uint64_t seed = 800;
  for (DType dt : {DType::UInt8, DType::Int8}) {
    for (bool r : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (r ? " relu" : ""));
      const double lo = dt == DType::UInt8 ? 0 : -127;
      const Tensor x = ints({8, 300}, ++seed, lo, 127, dt);
      const Tensor w = ints({50, 300}, ++seed, -127, 127, DType::Int8);
      const Tensor b = ints({50}, ++seed, -30000, 30000, DType::Int32);
      const Tensor s = scales(50, ++seed);
      const Tensor got = quantized_linear(x, w, b, s, r);
      const Tensor acc =
          matmul(to_dtype(x, DType::Float64), transpose(to_dtype(w, DType::Float64), 0, 1));
      expect_equal_or_close(got, reference_epilogue(acc, b, s, {1, 50}, r));
    }
  }
}

TEST(QuantizedOps, QuantizeRoundsHalfToEvenAndSaturates) {
  const Tensor x = tensor({0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0, 1e30, -1e30,
                           std::numeric_limits<double>::quiet_NaN(), 0.49, 126.6},
                          {.dtype = DType::Float32});
  EXPECT_EQ(quantize_per_tensor(x, 1.0, DType::UInt8).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 2, 2, 0, 0, 255, 0, 255, 0, 0, 0, 127}));
  EXPECT_EQ(quantize_per_tensor(x, 1.0, DType::Int8).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 2, 2, 0, -2, 127, -127, 127, -127, 0, 0, 127}));
  // The scale divides: 0.75 / 0.25 = 3.
  EXPECT_EQ(quantize_per_tensor(tensor({0.75}), 0.25, DType::Int8).to_vector<int64_t>(),
            (std::vector<int64_t>{3}));
}

TEST(QuantizedOps, AChangedWeightIsNotServedFromTheCache) {
  const Tensor x = ints({1, 8, 5, 5}, 901, 0, 255, DType::UInt8);
  const Tensor w = ints({16, 8, 3, 3}, 902, -127, 127, DType::Int8);
  const Tensor b = zeros({16}, {.dtype = DType::Int32});
  const Tensor s = full({16}, 1e-3, {.dtype = DType::Float32});
  const Tensor first = quantized_conv2d(x, w, b, s, false);
  Tensor(w).copy_(ints({16, 8, 3, 3}, 903, -127, 127, DType::Int8));
  const Tensor second = quantized_conv2d(x, w, b, s, false);
  const Tensor acc = conv2d(to_dtype(x, DType::Float64), to_dtype(w, DType::Float64));
  expect_equal_or_close(second, reference_epilogue(acc, b, s, {1, 16, 1, 1}, false));
  EXPECT_NE(first.to_vector<float>(), second.to_vector<float>());
}

TEST(QuantizedOps, BadOperandsAreErrors) {
  const Tensor x = ints({1, 4, 5, 5}, 911, 0, 255, DType::UInt8);
  const Tensor w = ints({6, 4, 3, 3}, 912, -127, 127, DType::Int8);
  const Tensor b = zeros({6}, {.dtype = DType::Int32});
  const Tensor s = full({6}, 1e-3, {.dtype = DType::Float32});
  expect_error([&] { quantized_conv2d(to_dtype(x, DType::Float32), w, b, s, false); },
               {"[quantized_conv2d]", "uint8 or int8 input", "float32[1, 4, 5, 5]"});
  expect_error([&] { quantized_conv2d(x, to_dtype(w, DType::Float32), b, s, false); },
               {"[quantized_conv2d]", "int8 weight"});
  expect_error([&] { quantized_conv2d(x, w, zeros({5}, {.dtype = DType::Int32}), s, false); },
               {"[quantized_conv2d]", "int32 bias of shape [6]", "int32[5]"});
  expect_error([&] { quantized_conv2d(x, w, b, to_dtype(s, DType::Float64), false); },
               {"[quantized_conv2d]", "float32 out_scale"});
  expect_error(
      [&] {
        quantized_conv2d(x, ints({6, 3, 3, 3}, 913, -1, 1, DType::Int8), b, s, false);
      },
      {"[quantized_conv2d]", "input channels"});
  expect_error([&] { quantized_conv2d(slice(x, 2, 0, 1), w, b, s, false); },
               {"[quantized_conv2d]"});
  expect_error(
      [&] {
        quantized_linear(ints({2, 7}, 914, 0, 9, DType::UInt8),
                         ints({3, 6}, 915, -1, 1, DType::Int8), zeros({3}, {.dtype = DType::Int32}),
                         full({3}, 1.0, {.dtype = DType::Float32}), false);
      },
      {"[quantized_linear]", "[..., 6]"});
  expect_error([&] { quantize_per_tensor(x, 0.1, DType::UInt8); },
               {"[quantize_per_tensor]", "floating input", "uint8"});
  expect_error([&] { quantize_per_tensor(tensor({1.0}), 0.0, DType::UInt8); },
               {"[quantize_per_tensor]", "scale > 0"});
  expect_error([&] { quantize_per_tensor(tensor({1.0}), 0.1, DType::Int32); },
               {"[quantize_per_tensor]", "uint8 or int8", "int32"});
}

}  // namespace
}  // namespace kiln
