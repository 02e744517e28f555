#include <gtest/gtest.h>

#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/interpolate.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::expect_values;

InterpolateOptions size_opts(int64_t h, int64_t w, std::string mode, std::string coord = "") {
  InterpolateOptions o;
  o.size = std::make_pair(h, w);
  o.mode = std::move(mode);
  o.coordinate_mode = std::move(coord);
  return o;
}

InterpolateOptions scale_opts(double h, double w, std::string mode, std::string coord = "") {
  InterpolateOptions o;
  o.scale_factor = std::make_pair(h, w);
  o.mode = std::move(mode);
  o.coordinate_mode = std::move(coord);
  return o;
}

TEST(Interpolate, NearestDefaultsToPyTorchLegacy) {
  Tensor x = tensor<double>({1, 2, 3, 4}, Shape{1, 1, 2, 2});
  Tensor y = interpolate(x, size_opts(4, 4, "nearest"));
  expect_values(y, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 0);
  // Width 3 -> 2 picks floor(o * 1.5): indices 0 and 1 (asymmetric); nearest-exact (half_pixel)
  // picks floor((o + 0.5) * 1.5): indices 0 and 2.
  Tensor r = tensor<double>({1, 2, 3}, Shape{1, 1, 1, 3});
  expect_values(interpolate(r, size_opts(1, 2, "nearest")), {1, 2}, 0);
  expect_values(interpolate(r, size_opts(1, 2, "nearest", "asymmetric")), {1, 2}, 0);
  expect_values(interpolate(r, size_opts(1, 2, "nearest", "half_pixel")), {1, 3}, 0);
  // Any dtype works for nearest.
  Tensor u = tensor<uint8_t>({7, 9}, Shape{1, 1, 1, 2});
  EXPECT_EQ(interpolate(u, scale_opts(1, 2, "nearest")).to_vector<int64_t>(),
            (std::vector<int64_t>{7, 7, 9, 9}));
}

TEST(Interpolate, BilinearCoordinateModes) {
  Tensor x = tensor<double>({0, 1}, Shape{1, 1, 1, 2});
  expect_values(interpolate(x, size_opts(1, 3, "bilinear", "align_corners")), {0, 0.5, 1}, 1e-15);
  // Default = align_corners_false: src = (o + 0.5) * 2 / 4 - 0.5, clamped at 0.
  expect_values(interpolate(x, size_opts(1, 4, "bilinear")), {0, 0.25, 0.75, 1}, 1e-15);
  expect_values(interpolate(x, size_opts(1, 4, "bilinear", "align_corners_false")),
                {0, 0.25, 0.75, 1}, 1e-15);
  expect_values(interpolate(x, size_opts(1, 4, "bilinear", "pytorch_half_pixel")),
                {0, 0.25, 0.75, 1}, 1e-15);
  expect_values(interpolate(x, size_opts(1, 4, "bilinear", "half_pixel")), {0, 0.25, 0.75, 1},
                1e-15);
  expect_values(interpolate(x, size_opts(1, 4, "bilinear", "asymmetric")), {0, 0.5, 1, 1}, 1e-15);
  // Output size 1, each mode by its own definition: PyTorch's align_corners=False (the default)
  // and ONNX's half_pixel sample the centre, ONNX's pytorch_half_pixel index 0, align_corners
  // (PyTorch and ONNX) index 0, asymmetric index 0.
  Tensor c = tensor<double>({0, 1, 2, 3}, Shape{1, 1, 1, 4});
  expect_values(interpolate(c, size_opts(1, 1, "bilinear")), {1.5}, 1e-15);
  expect_values(interpolate(c, size_opts(1, 1, "bilinear", "align_corners_false")), {1.5}, 1e-15);
  expect_values(interpolate(c, size_opts(1, 1, "bilinear", "pytorch_half_pixel")), {0}, 0);
  expect_values(interpolate(c, size_opts(1, 1, "bilinear", "half_pixel")), {1.5}, 1e-15);
  expect_values(interpolate(c, size_opts(1, 1, "bilinear", "align_corners")), {0}, 0);
  expect_values(interpolate(c, size_opts(1, 1, "bilinear", "asymmetric")), {0}, 0);
  // The repro: [0, 1, 2] to size 1 is 1 in PyTorch, forward and gradient (all to index 1).
  Tensor r = tensor<double>({0, 1, 2}, Shape{1, 1, 1, 3});
  expect_values(interpolate(r, size_opts(1, 1, "bilinear")), {1}, 0);
  expect_values(interpolate_backward(ones({1, 1, 1, 1}, {DType::Float64}), r.shape(),
                                     size_opts(1, 1, "bilinear")),
                {0, 1, 0}, 0);
  // ONNX's pytorch_half_pixel is ONNX's: it uses the scale factor even when the size matches
  // (5 * 1.1 floors to 5), where PyTorch's align_corners=False copies.
  Tensor five = tensor<double>({0, 1, 2, 3, 4}, Shape{1, 1, 1, 5});
  expect_values(interpolate(five, scale_opts(1.0, 1.1, "bilinear")), {0, 1, 2, 3, 4}, 0);
  std::vector<double> onnx =
      interpolate(five, scale_opts(1.0, 1.1, "bilinear", "pytorch_half_pixel")).to_vector<double>();
  EXPECT_NEAR(onnx[4], 4.5 / 1.1 - 0.5, 1e-12);
}

TEST(Interpolate, ScaleFactorDrivesCoordinates) {
  Tensor x = sample_tensor({1, 1, 5, 5}, 1);
  // 5 * 1.1 floors to 5: PyTorch's modes copy, the ONNX half_pixel mode uses scale 1 / 1.1.
  Tensor same = interpolate(x, scale_opts(1.1, 1.1, "bilinear"));
  EXPECT_EQ(same.to_vector<double>(), x.to_vector<double>());
  Tensor onnx = interpolate(x, scale_opts(1.1, 1.1, "bilinear", "half_pixel"));
  EXPECT_NE(onnx.to_vector<double>(), x.to_vector<double>());
  // Width 4 -> 8 with factor 2: asymmetric src = o / 2.
  Tensor r = tensor<double>({0, 2, 4, 6}, Shape{1, 1, 1, 4});
  expect_values(interpolate(r, scale_opts(1, 2, "bilinear", "asymmetric")),
                {0, 1, 2, 3, 4, 5, 6, 6}, 1e-15);
}

TEST(Interpolate, StridedAndFloat32) {
  Tensor base = sample_tensor({2, 5, 4, 3}, 2);
  Tensor t = permute(base, {0, 3, 1, 2});  // [2, 3, 5, 4], strided
  for (const std::string mode : {"nearest", "bilinear"}) {
    InterpolateOptions o = size_opts(7, 3, mode);
    EXPECT_EQ(interpolate(t, o).to_vector<double>(),
              interpolate(contiguous(t), o).to_vector<double>());
    Tensor f = interpolate(to_dtype(t, DType::Float32), o);
    EXPECT_EQ(f.dtype(), DType::Float32);
    expect_values(f, interpolate(t, o).to_vector<double>(), 1e-6);
  }
}

// interpolate_backward is the adjoint of interpolate: <A x, g> = <x, A^T g>.
TEST(Interpolate, BackwardIsAdjoint) {
  const std::vector<InterpolateOptions> all = {
      size_opts(7, 5, "nearest"),
      scale_opts(1.5, 0.5, "nearest", "half_pixel"),
      size_opts(7, 5, "bilinear", "align_corners"),
      size_opts(2, 9, "bilinear", "half_pixel"),
      scale_opts(0.7, 2.5, "bilinear", "pytorch_half_pixel"),
      size_opts(1, 6, "bilinear", "asymmetric")};
  Tensor x = sample_tensor({2, 3, 4, 4}, 3);
  for (const InterpolateOptions& o : all) {
    Tensor y = interpolate(x, o);
    Tensor g = sample_tensor(y.shape(), 4);
    Tensor gx = interpolate_backward(g, x.shape(), o);
    EXPECT_NEAR(sum(mul(y, g)).item(), sum(mul(x, gx)).item(), 1e-12)
        << o.mode << " " << o.coordinate_mode;
  }
}

TEST(Interpolate, Gradchecks) {
  for (const InterpolateOptions& o :
       {size_opts(5, 3, "bilinear", "align_corners"), size_opts(3, 5, "nearest")}) {
    auto f = [o](const std::vector<Tensor>& in) { return std::vector{interpolate(in[0], o)}; };
    EXPECT_TRUE(gradcheck(f, {sample_tensor({1, 2, 3, 2}, 5)}));
    EXPECT_TRUE(gradgradcheck(f, {sample_tensor({1, 2, 3, 2}, 6)}));
  }
}

TEST(Interpolate, Errors) {
  expect_error(
      [] {
        interpolate(zeros({2, 3, 4}), size_opts(2, 2, "nearest"));
      },
      {"[interpolate]", "rank 4", "float32[2, 3, 4]", "test_interpolate.cpp"});
  expect_error(
      [] {
        InterpolateOptions o = size_opts(2, 2, "bilinear");
        o.scale_factor = std::make_pair(2.0, 2.0);
        interpolate(zeros({1, 1, 2, 2}), o);
      },
      {"[interpolate]", "exactly one of size and scale_factor", "both", "float32[1, 1, 2, 2]",
       "test_interpolate.cpp"});
  expect_error(
      [] {
        interpolate(zeros({1, 1, 2, 2}), size_opts(2, 2, "bicubic"));
      },
      {"[interpolate]", "\"bicubic\"", "test_interpolate.cpp"});
  expect_error(
      [] {
        interpolate(zeros({1, 1, 2, 2}), size_opts(2, 2, "nearest", "align_corners"));
      },
      {"[interpolate]", "\"align_corners\"", "\"nearest\"", "test_interpolate.cpp"});
  expect_error(
      [] {
        interpolate(zeros({1, 1, 2, 2}), scale_opts(-1, 2, "nearest"));
      },
      {"[interpolate]", "positive finite", "test_interpolate.cpp"});
  expect_error(
      [] {
        interpolate(zeros({1, 1, 2, 2}), scale_opts(0.2, 2, "nearest"));
      },
      {"[interpolate]", "output size > 0", "(0, 4)", "test_interpolate.cpp"});
  expect_error(
      [] {
        interpolate(zeros({1, 1, 2, 2}, {DType::Int64}), size_opts(3, 3, "bilinear"));
      },
      {"[interpolate]", "floating-point", "int64[1, 1, 2, 2]", "test_interpolate.cpp"});
  expect_error(
      [] {
        interpolate_backward(zeros({1, 1, 3, 3}), {1, 1, 2, 2}, size_opts(4, 4, "nearest"));
      },
      {"[interpolate_backward]", "[1, 1, 4, 4]", "float32[1, 1, 3, 3]", "test_interpolate.cpp"});
}

TEST(Interpolate, MetaShapes) {
  Tensor x = empty({2, 3, 5, 4}, {DType::Float32, kMeta});
  EXPECT_EQ(interpolate(x, scale_opts(1.5, 0.5, "bilinear")).shape(), (Shape{2, 3, 7, 2}));
}

}  // namespace
}  // namespace kiln
