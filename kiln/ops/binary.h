#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

// Broadcasting arithmetic with PyTorch's type promotion (type_promotion.h). Gradients are summed
// back to each input's shape. A C++ number operand is a "wrapped scalar": it never widens a
// tensor's dtype within the same category (float32 tensor * 2.0 stays float32).
Tensor add(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor sub(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor mul(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
// True division: integer inputs give float32, as torch.div.
Tensor div(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor pow(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor maximum(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor minimum(const Tensor& a, const Tensor& b, const Loc& loc = Loc::current());

// Note [C++ number operands]: C++ passes 2 and 2.0 as the same double, so kiln cannot tell an
// integer literal from a floating one the way Python can. The rule kiln takes: a number with an
// integral value (2, 2.0, -3.0) is an int64 scalar, any other (2.5, 1e-3, NaN, inf) a float64
// scalar, so `int_tensor * 2` stays int64 and `int_tensor * 0.5` is float32, as in PyTorch. The
// one difference from PyTorch: `int_tensor * 2.0` stays int64 (PyTorch gives float32); write
// `to_dtype(t, DType::Float32) * 2.0` when a float result is wanted. Floating tensors are never
// affected (`float32_tensor * 2` is float32).
Tensor add(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor sub(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor mul(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor div(const Tensor& a, double b, const Loc& loc = Loc::current());
Tensor add(double a, const Tensor& b, const Loc& loc = Loc::current());
Tensor sub(double a, const Tensor& b, const Loc& loc = Loc::current());
Tensor mul(double a, const Tensor& b, const Loc& loc = Loc::current());
Tensor div(double a, const Tensor& b, const Loc& loc = Loc::current());
Tensor pow(double a, const Tensor& b, const Loc& loc = Loc::current());
// A size as an operand (x / x.dim_size(0)): the same as its number, and while tracing the number
// stays symbolic (Note [size lists]), so the graph divides by the batch of each call.
Tensor add(const Tensor& a, const SymInt& b, const Loc& loc = Loc::current());
Tensor sub(const Tensor& a, const SymInt& b, const Loc& loc = Loc::current());
Tensor mul(const Tensor& a, const SymInt& b, const Loc& loc = Loc::current());
Tensor div(const Tensor& a, const SymInt& b, const Loc& loc = Loc::current());
Tensor add(const SymInt& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor sub(const SymInt& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor mul(const SymInt& a, const Tensor& b, const Loc& loc = Loc::current());
Tensor div(const SymInt& a, const Tensor& b, const Loc& loc = Loc::current());

// A C++ number as a zero-dim "wrapped scalar" tensor on `like`'s device.
Tensor scalar_like(double value, const Tensor& like);

// Operators. C++ operators cannot take a defaulted source_location, so their errors point into
// binary.cpp; call add()/sub()/mul()/div() where the caller's line matters.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator+(const Tensor& a, const SymInt& b);
Tensor operator-(const Tensor& a, const SymInt& b);
Tensor operator*(const Tensor& a, const SymInt& b);
Tensor operator/(const Tensor& a, const SymInt& b);
Tensor operator+(const SymInt& a, const Tensor& b);
Tensor operator-(const SymInt& a, const Tensor& b);
Tensor operator*(const SymInt& a, const Tensor& b);
Tensor operator/(const SymInt& a, const Tensor& b);
Tensor operator-(const Tensor& a);

}  // namespace kiln
