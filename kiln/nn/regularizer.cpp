#include "kiln/nn/regularizer.h"

#include <cmath>
#include <utility>

#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

namespace {

void check_factor(const char* what, double f, const Loc& loc) {
  if (!std::isfinite(f) || f < 0.0)
    fail("Regularizer", loc, "expected {} to be a finite factor >= 0, but got {}", what, f);
}

}  // namespace

Regularizer::Regularizer(double l1, double l2, const Loc& loc) : l1_(l1), l2_(l2) {
  check_factor("l1", l1, loc);
  check_factor("l2", l2, loc);
}

Regularizer::Regularizer(std::string name, Fn fn, const Loc& loc)
    : name_(std::move(name)), fn_(std::move(fn)) {
  if (!fn_) fail("Regularizer", loc, "expected a penalty function for '{}', but got none", name_);
  if (name_.empty()) name_ = "custom";
}

Tensor Regularizer::operator()(const Tensor& x, const Loc& loc) const {
  if (!x.defined() || !is_floating(x.dtype()))
    fail("Regularizer", loc, "expected a floating-point tensor for {}, but got {}", to_string(),
         x.defined() ? x.describe() : "an undefined tensor");
  if (fn_) {
    Tensor out = fn_(x);
    if (!out.defined() || out.numel() != 1)
      fail("Regularizer", loc, "expected {} to return one value, but got {} for {}", name_,
           out.defined() ? out.describe() : "an undefined tensor", x.describe());
    return out.dim() == 0 ? out : reshape(out, {}, loc);
  }
  Tensor total;
  if (l1_ != 0.0) total = mul(sum(abs(x, loc), {}, false, loc), l1_, loc);
  if (l2_ != 0.0) {
    Tensor term = mul(sum(mul(x, x, loc), {}, false, loc), l2_, loc);
    total = total.defined() ? add(total, term, loc) : term;
  }
  return total.defined() ? total : zeros({}, TensorOptions{x.dtype(), x.device()});
}

std::string Regularizer::to_string() const {
  if (fn_) return name_;
  if (l2_ == 0.0 && l1_ != 0.0) return fmt::format("L1(l1={})", l1_);
  if (l1_ == 0.0 && l2_ != 0.0) return fmt::format("L2(l2={})", l2_);
  return fmt::format("L1L2(l1={}, l2={})", l1_, l2_);
}

Regularizer l1(double factor, const Loc& loc) {
  return Regularizer(factor, 0.0, loc);
}

Regularizer l2(double factor, const Loc& loc) {
  return Regularizer(0.0, factor, loc);
}

Regularizer l1_l2(double l1_factor, double l2_factor, const Loc& loc) {
  return Regularizer(l1_factor, l2_factor, loc);
}

}  // namespace kiln::nn
