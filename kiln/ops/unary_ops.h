#pragma once
// The unary family's shared pieces: the attributes that its ops' definitions (unary.cpp) and their
// CPU kernel (kiln/backend/cpu/unary_ops.cpp, Note [kernel table]) both need, and the constants
// that gelu's math and its gradient share.
#include <optional>
#include <string>

#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

inline constexpr double kSqrt1_2 = 0.70710678118654752440;       // 1/sqrt(2)
inline constexpr double kGeluTanhBeta = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kGeluTanhKappa = 0.044715;

// clamp: at least one bound (infer checks).
struct ClampAttrs {
  std::optional<double> min, max;
};
const ClampAttrs& clamp_attrs(const Op& op);

// pow_scalar: x ** exponent.
struct PowScalarAttrs {
  double exponent = 1.0;
};
const PowScalarAttrs& pow_scalar_attrs(const Op& op);

// gelu: approximate is "none" or "tanh" (infer checks); use_tanh is approximate == "tanh".
struct GeluAttrs {
  std::string approximate = "none";
  bool use_tanh = false;
};
const GeluAttrs& gelu_attrs(const Op& op);

// softplus: log(1 + exp(beta x)) / beta, x above threshold.
struct SoftplusAttrs {
  double beta = 1.0, threshold = 20.0;
};
const SoftplusAttrs& softplus_attrs(const Op& op);

}  // namespace detail
}  // namespace kiln
