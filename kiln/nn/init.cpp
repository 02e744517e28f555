#include "kiln/nn/init.h"

#include <cmath>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"

namespace kiln::nn::init {

namespace {

void check_floating(const char* op, const Tensor& t, const Loc& loc) {
  if (!t.defined()) fail(op, loc, "expected a defined tensor, but got an undefined one");
  if (!is_floating(t.dtype()))
    fail(op, loc, "expected a floating-point tensor, but got {}", t.describe());
}

// Random draws happen in float64 for float64 tensors and float32 otherwise (16-bit floats are
// rounded on the copy), so a float32 parameter gets exactly the stream rand() would give.
DType draw_dtype(const Tensor& t) {
  return t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
}

int64_t fan(const Tensor& t, FanMode mode, const char* op, const Loc& loc) {
  if (t.dim() < 2)
    fail(op, loc, "expected a tensor with at least 2 dims to compute fan in/out, but got {}",
         t.describe());
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t, loc);
  return mode == FanMode::FanIn ? fan_in : fan_out;
}

}  // namespace

double calculate_gain(const std::string& nonlinearity, std::optional<double> param,
                      const Loc& loc) {
  static const char* kUnit[] = {"linear",           "conv1d",           "conv2d",
                                "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                "conv_transpose3d", "sigmoid"};
  for (const char* name : kUnit)
    if (nonlinearity == name) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  fail("calculate_gain", loc,
       "expected one of linear, conv*, conv_transpose*, sigmoid, tanh, relu, leaky_relu, selu, "
       "but got '{}'",
       nonlinearity);
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t, const Loc& loc) {
  if (t.dim() < 2)
    fail("calculate_fan_in_and_fan_out", loc, "expected a tensor with at least 2 dims, but got {}",
         t.describe());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.dim_size(d);
  return {t.dim_size(1) * receptive, t.dim_size(0) * receptive};
}

const Tensor& uniform_(const Tensor& t, double low, double high, Generator* gen, const Loc& loc) {
  check_floating("uniform_", t, loc);
  if (!(low <= high))
    fail("uniform_", loc, "expected low <= high, but got low={} and high={}", low, high);
  NoGradGuard no_grad;
  Tensor r = rand(t.shape(), TensorOptions{draw_dtype(t)}, gen);
  Tensor(t).copy_(add(mul(r, high - low, loc), low, loc), loc);
  return t;
}

const Tensor& normal_(const Tensor& t, double mean, double std, Generator* gen, const Loc& loc) {
  check_floating("normal_", t, loc);
  if (!(std >= 0)) fail("normal_", loc, "expected std >= 0, but got {}", std);
  NoGradGuard no_grad;
  Tensor r = randn(t.shape(), TensorOptions{draw_dtype(t)}, gen);
  Tensor(t).copy_(add(mul(r, std, loc), mean, loc), loc);
  return t;
}

const Tensor& constant_(const Tensor& t, double value, const Loc& loc) {
  check_floating("constant_", t, loc);
  NoGradGuard no_grad;
  Tensor(t).fill_(value, loc);
  return t;
}

const Tensor& zeros_(const Tensor& t, const Loc& loc) {
  return constant_(t, 0.0, loc);
}
const Tensor& ones_(const Tensor& t, const Loc& loc) {
  return constant_(t, 1.0, loc);
}

const Tensor& kaiming_uniform_(const Tensor& t, double a, FanMode mode,
                               const std::string& nonlinearity, Generator* gen, const Loc& loc) {
  check_floating("kaiming_uniform_", t, loc);
  double gain = calculate_gain(nonlinearity, a, loc);
  double bound =
      std::sqrt(3.0) * gain / std::sqrt(static_cast<double>(fan(t, mode, "kaiming_uniform_", loc)));
  return uniform_(t, -bound, bound, gen, loc);
}

const Tensor& kaiming_normal_(const Tensor& t, double a, FanMode mode,
                              const std::string& nonlinearity, Generator* gen, const Loc& loc) {
  check_floating("kaiming_normal_", t, loc);
  double gain = calculate_gain(nonlinearity, a, loc);
  double std = gain / std::sqrt(static_cast<double>(fan(t, mode, "kaiming_normal_", loc)));
  return normal_(t, 0.0, std, gen, loc);
}

const Tensor& xavier_uniform_(const Tensor& t, double gain, Generator* gen, const Loc& loc) {
  check_floating("xavier_uniform_", t, loc);
  fan(t, FanMode::FanIn, "xavier_uniform_", loc);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t, loc);
  double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(t, -a, a, gen, loc);
}

const Tensor& xavier_normal_(const Tensor& t, double gain, Generator* gen, const Loc& loc) {
  check_floating("xavier_normal_", t, loc);
  fan(t, FanMode::FanIn, "xavier_normal_", loc);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t, loc);
  double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return normal_(t, 0.0, std, gen, loc);
}

// kiln has no QR op; the Gram-Schmidt below (run twice per column, "CGS2", which keeps the
// columns orthogonal to rounding error) gives the same Q as Householder QR with R's diagonal made
// positive, the normalization PyTorch applies.
const Tensor& orthogonal_(const Tensor& t, double gain, Generator* gen, const Loc& loc) {
  check_floating("orthogonal_", t, loc);
  if (t.dim() < 2)
    fail("orthogonal_", loc, "expected a tensor with at least 2 dims, but got {}", t.describe());
  int64_t rows = t.dim_size(0);
  int64_t cols = rows == 0 ? 0 : t.numel() / rows;
  if (t.numel() == 0) return t;
  std::vector<double> a;
  {
    NoGradGuard no_grad;
    a = randn({rows, cols}, TensorOptions{DType::Float64}, gen).to_vector<double>();
  }
  // Work on the tall orientation: m >= n, columns are orthonormalized.
  bool wide = rows < cols;
  int64_t m = wide ? cols : rows, n = wide ? rows : cols;
  // q is column-major m x n.
  std::vector<double> q(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      int64_t r = wide ? j : i, c = wide ? i : j;
      q[c * m + r] = a[i * cols + j];
    }
  for (int64_t j = 0; j < n; ++j) {
    double* qj = &q[j * m];
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t k = 0; k < j; ++k) {
        const double* qk = &q[k * m];
        double dot = 0;
        for (int64_t r = 0; r < m; ++r) dot += qk[r] * qj[r];
        for (int64_t r = 0; r < m; ++r) qj[r] -= dot * qk[r];
      }
    double norm = 0;
    for (int64_t r = 0; r < m; ++r) norm += qj[r] * qj[r];
    norm = std::sqrt(norm);
    for (int64_t r = 0; r < m; ++r) qj[r] /= norm;
  }
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      int64_t r = wide ? j : i, c = wide ? i : j;
      out[i * cols + j] = gain * q[c * m + r];
    }
  NoGradGuard no_grad;
  Tensor(t).copy_(tensor<double>(out, t.shape()), loc);
  return t;
}

}  // namespace kiln::nn::init
