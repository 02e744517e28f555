#pragma once
#include <optional>
#include <string>
#include <utility>

#include "kiln/core/rng.h"
#include "kiln/core/tensor.h"

namespace kiln::nn {

// Default initialization scheme of a layer. PyTorch is the default everywhere; Keras gives what
// the same layer gets in Keras (see each layer's constructor for the exact mapping).
enum class InitProfile { PyTorch, Keras };

// As torch.nn.init. Every function fills `t` in place without recording gradient, draws from
// `gen` (default_generator() when null) and returns t. Floating-point tensors only.
namespace init {

enum class FanMode { FanIn, FanOut };

// torch.nn.init.calculate_gain: "linear", "conv1d/2d/3d", "conv_transpose1d/2d/3d", "sigmoid"
// -> 1, "tanh" -> 5/3, "relu" -> sqrt(2), "leaky_relu" -> sqrt(2 / (1 + slope^2)) (slope
// defaults to 0.01), "selu" -> 3/4.
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = std::nullopt,
                      const Loc& loc = Loc::current());
// PyTorch's _calculate_fan_in_and_fan_out: fan_in = size(1) * receptive field, fan_out = size(0)
// * receptive field, receptive field = product of dims 2..; needs rank >= 2.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t,
                                                         const Loc& loc = Loc::current());

const Tensor& uniform_(const Tensor& t, double low = 0.0, double high = 1.0,
                       Generator* gen = nullptr, const Loc& loc = Loc::current());
const Tensor& normal_(const Tensor& t, double mean = 0.0, double std = 1.0,
                      Generator* gen = nullptr, const Loc& loc = Loc::current());
const Tensor& constant_(const Tensor& t, double value, const Loc& loc = Loc::current());
const Tensor& zeros_(const Tensor& t, const Loc& loc = Loc::current());
const Tensor& ones_(const Tensor& t, const Loc& loc = Loc::current());

// U(-bound, bound), bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
const Tensor& kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                               const std::string& nonlinearity = "leaky_relu",
                               Generator* gen = nullptr, const Loc& loc = Loc::current());
// N(0, std^2), std = gain / sqrt(fan).
const Tensor& kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                              const std::string& nonlinearity = "leaky_relu",
                              Generator* gen = nullptr, const Loc& loc = Loc::current());
// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)) (Keras' glorot_uniform with gain 1).
const Tensor& xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr,
                              const Loc& loc = Loc::current());
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
const Tensor& xavier_normal_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr,
                             const Loc& loc = Loc::current());
// A (semi-)orthogonal matrix over t viewed as [size(0), numel / size(0)], scaled by gain: Q of
// the QR decomposition of a normal matrix with R's diagonal made positive, as PyTorch does.
const Tensor& orthogonal_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr,
                          const Loc& loc = Loc::current());

}  // namespace init
}  // namespace kiln::nn
