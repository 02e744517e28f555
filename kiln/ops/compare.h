#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

// Broadcasting comparisons and logic; results are bool tensors, not differentiable.
Tensor eq(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor ne(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor lt(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor le(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor gt(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor ge(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor eq(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor ne(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor lt(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor le(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor gt(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor ge(const Tensor& a, double b, const Loc& loc = Loc::current());
// Non-bool inputs are read as "nonzero", as torch.logical_*.
Tensor logical_and(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor logical_or(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor logical_xor(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor logical_not(const Tensor& a, const Loc& loc = Loc::current());

// cond ? a : b with broadcasting of all three; cond must be bool. Differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor where(const Tensor& cond, const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor where(const Tensor& cond, double a, const Tensor& b, const Loc& loc = Loc::current());

}  // namespace kiln
