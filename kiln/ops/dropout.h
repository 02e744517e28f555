#pragma once
#include "kiln/core/rng.h"
#include "kiln/core/tensor.h"

namespace kiln {

// As torch.nn.functional.dropout: while training, zeroes each element with probability p and
// scales the kept ones by 1 / (1 - p), so the expected value is unchanged.
//   - p must be in [0, 1]; anything else (NaN included) is an error.
//   - training == false or p == 0 returns x itself (no copy, no random draw).
//   - p == 1 returns x * 0 (zeros with x's NaN/Inf propagated, as PyTorch) without a draw.
// The keep mask is mask[i] = (u_i < 1 - p) for the uniforms of fill_bernoulli (Note [random
// streams] in core/rng.h), drawn in x's row-major logical order whatever its strides, from `gen`
// (default_generator() when null). So the mask depends only on the generator's state and x's
// shape: seeding (or set_state) reproduces it for any thread count. The masks differ from
// PyTorch's for equal seeds. On meta tensors nothing is drawn and gen is left untouched.
// The gradient is g * mask / (1 - p); the mask is saved as a bool tensor.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr,
               const Loc& loc = Loc::current());

}  // namespace kiln
