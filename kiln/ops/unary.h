#pragma once
#include <optional>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln {

// Elementwise functions. Integer inputs to floating functions (exp, sqrt, ...) promote to float32
// like PyTorch; 16-bit floats compute in float32 and round the result back.
Tensor neg(const Tensor& x, const Loc& loc = Loc::current());
Tensor abs(const Tensor& x, const Loc& loc = Loc::current());
Tensor sign(const Tensor& x, const Loc& loc = Loc::current());
Tensor exp(const Tensor& x, const Loc& loc = Loc::current());
Tensor log(const Tensor& x, const Loc& loc = Loc::current());
Tensor log1p(const Tensor& x, const Loc& loc = Loc::current());
Tensor sqrt(const Tensor& x, const Loc& loc = Loc::current());
Tensor rsqrt(const Tensor& x, const Loc& loc = Loc::current());
Tensor sin(const Tensor& x, const Loc& loc = Loc::current());
Tensor cos(const Tensor& x, const Loc& loc = Loc::current());
Tensor erf(const Tensor& x, const Loc& loc = Loc::current());
Tensor tanh(const Tensor& x, const Loc& loc = Loc::current());
Tensor sigmoid(const Tensor& x, const Loc& loc = Loc::current());
Tensor relu(const Tensor& x, const Loc& loc = Loc::current());
// relu's gradient in one op: grad where x > 0, else 0 (selected, not multiplied, so a NaN x
// passes grad and a NaN grad at x <= 0 gives 0, as PyTorch's threshold_backward). grad and x have
// the same shape and floating dtype.
Tensor relu_backward(const Tensor& grad, const Tensor& x, const Loc& loc = Loc::current());
// approximate: "none" (exact, erf) or "tanh", as torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, const std::string& approximate = "none",
            const Loc& loc = Loc::current());
Tensor silu(const Tensor& x, const Loc& loc = Loc::current());
// log(1 + exp(beta * x)) / beta, linear above threshold, as torch.nn.functional.softplus.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0,
                const Loc& loc = Loc::current());
// At least one bound must be given. Gradient flows where min <= x <= max (PyTorch's convention).
// An integer tensor stays integer even for a fractional bound (PyTorch 1.13 promotes to float32):
// the result is the exact integer one, min rounded up and max down (Note [integer clamp]).
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max,
             const Loc& loc = Loc::current());
// x ** exponent with a scalar exponent.
Tensor pow(const Tensor& x, double exponent, const Loc& loc = Loc::current());

}  // namespace kiln
