// Reductions of losses and the elementwise losses (regression, binary cross entropy, KL
// divergence). These are composites of public ops: their gradients (higher-order included) come
// from the ops they are built of. Classification losses live in loss_classification.cpp.
#include "kiln/ops/loss.h"

#include <string>

#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

Reduction reduction_from_string(std::string_view name, const Loc& loc) {
  if (name == "none") return Reduction::None;
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  if (name == "batchmean") return Reduction::BatchMean;
  fail("reduction", loc, "expected \"none\", \"mean\", \"sum\" or \"batchmean\", but got \"{}\"",
       name);
}

const char* reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return "none";
    case Reduction::Mean:
      return "mean";
    case Reduction::Sum:
      return "sum";
    case Reduction::BatchMean:
      return "batchmean";
  }
  return "mean";
}

Tensor reduce_loss(const Tensor& loss, Reduction reduction, std::string_view op, const Loc& loc) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Mean:
      return mean(loss, {}, false, loc);
    case Reduction::Sum:
      return sum(loss, {}, false, loc);
    case Reduction::BatchMean:
      break;
  }
  fail(op, loc, "expected reduction none, mean or sum, but got batchmean (kl_div only) for {}",
       loss.describe());
}

namespace {

// Input and target of an elementwise loss: floating and broadcastable (errors name the loss).
void check_pair(const char* op, const Tensor& input, const Tensor& target, const Loc& loc) {
  if (!is_floating(input.dtype()) || !is_floating(target.dtype()))
    fail(op, loc, "expected floating-point input and target, but got input {} and target {}",
         input.describe(), target.describe());
  broadcast_shapes(input.shape(), input.dtype(), target.shape(), target.dtype(), op, loc);
}

void check_same_shape(const char* op, const Tensor& input, const Tensor& target, const Loc& loc) {
  if (!is_floating(input.dtype()) || !is_floating(target.dtype()) ||
      input.shape() != target.shape())
    fail(op, loc,
         "expected floating-point input and target of the same shape, but got input {} and "
         "target {}",
         input.describe(), target.describe());
}

// An optional per-element factor (weight, pos_weight) must broadcast to `like`'s shape.
void check_factor(const char* op, const char* what, const Tensor& factor, const Tensor& like,
                  const Loc& loc) {
  if (!factor.defined()) return;
  bool ok = is_floating(factor.dtype()) && factor.dim() <= like.dim();
  for (int64_t i = 1; ok && i <= factor.dim(); ++i) {
    const int64_t f = factor.dim_size(-i);
    ok = f == 1 || f == like.dim_size(-i);
  }
  if (!ok)
    fail(op, loc, "expected a floating-point {} that broadcasts to {}, but got {}", what,
         like.describe(), factor.describe());
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction, const Loc& loc) {
  check_pair("mse_loss", input, target, loc);
  const Tensor d = sub(input, target, loc);
  return reduce_loss(mul(d, d, loc), reduction, "mse_loss", loc);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, const Loc& loc) {
  check_pair("l1_loss", input, target, loc);
  return reduce_loss(abs(sub(input, target, loc), loc), reduction, "l1_loss", loc);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta,
                      const Loc& loc) {
  check_pair("smooth_l1_loss", input, target, loc);
  if (!(beta >= 0))
    fail("smooth_l1_loss", loc, "expected beta >= 0, but got {} for input {}", beta,
         input.describe());
  // beta = 0 is exactly l1 (and the quadratic branch would divide by zero).
  if (beta == 0) return l1_loss(input, target, reduction, loc);
  const Tensor d = sub(input, target, loc);
  const Tensor a = abs(d, loc);
  // Note [branch-safe where]: the quadratic branch squares only the small differences, so a
  // difference where it is not taken (even inf) sends it a zero gradient, not 0 * inf = nan.
  const Tensor small = lt(a, beta, loc);
  const Tensor dq = where(small, d, 0.0, loc);
  const Tensor l =
      where(small, mul(mul(dq, dq, loc), 0.5 / beta, loc), sub(a, 0.5 * beta, loc), loc);
  return reduce_loss(l, reduction, "smooth_l1_loss", loc);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta,
                  const Loc& loc) {
  check_pair("huber_loss", input, target, loc);
  if (!(delta > 0))
    fail("huber_loss", loc, "expected delta > 0, but got {} for input {}", delta, input.describe());
  const Tensor d = sub(input, target, loc);
  const Tensor a = abs(d, loc);
  const Tensor small = lt(a, delta, loc);  // Note [branch-safe where]
  const Tensor dq = where(small, d, 0.0, loc);
  const Tensor l =
      where(small, mul(mul(dq, dq, loc), 0.5, loc), mul(sub(a, 0.5 * delta, loc), delta, loc), loc);
  return reduce_loss(l, reduction, "huber_loss", loc);
}

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, const Tensor& weight,
                            Reduction reduction, const Loc& loc) {
  check_same_shape("binary_cross_entropy", probs, target, loc);
  check_factor("binary_cross_entropy", "weight", weight, probs, loc);
  // PyTorch clamps each log at -100 so that p = 0 or 1 gives a finite loss.
  const Tensor log_p = clamp(log(probs, loc), -100.0, std::nullopt, loc);
  const Tensor log_q = clamp(log(sub(1.0, probs, loc), loc), -100.0, std::nullopt, loc);
  // -(log_q + t (log_p - log_q)): the target's gradient is one product, g (log_q - log_p), as
  // PyTorch's, so an infinite incoming gradient gives an infinity, not inf - inf = nan.
  Tensor l = neg(add(log_q, mul(target, sub(log_p, log_q, loc), loc), loc), loc);
  if (weight.defined()) l = mul(l, weight, loc);
  return reduce_loss(l, reduction, "binary_cross_entropy", loc);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const Tensor& weight, const Tensor& pos_weight,
                                        Reduction reduction, const Loc& loc) {
  const char* op = "binary_cross_entropy_with_logits";
  check_same_shape(op, logits, target, loc);
  check_factor(op, "weight", weight, logits, loc);
  check_factor(op, "pos_weight", pos_weight, logits, loc);
  // -log sigmoid(x) = softplus(-x). The threshold is raised from 20 to 50 so that the linear
  // branch's error (log1p(exp(-50))) is below double precision; exp(50) fits float32.
  const Tensor sp = softplus(neg(logits, loc), 1.0, 50.0, loc);
  Tensor l = mul(sub(1.0, target, loc), logits, loc);
  if (pos_weight.defined()) {
    const Tensor log_weight = add(mul(sub(pos_weight, 1.0, loc), target, loc), 1.0, loc);
    l = add(l, mul(log_weight, sp, loc), loc);
  } else {
    l = add(l, sp, loc);
  }
  if (weight.defined()) l = mul(l, weight, loc);
  return reduce_loss(l, reduction, op, loc);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target,
              const Loc& loc) {
  check_pair("kl_div", input, target, loc);
  Tensor l;
  if (log_target) {
    l = mul(exp(target, loc), sub(target, input, loc), loc);
  } else {
    // xlogy(t, t) is 0 where t == 0; the log reads 1 there so that no 0 * -inf reaches a gradient.
    const Tensor zero = eq(target, 0.0, loc);
    const Tensor safe = where(zero, 1.0, target, loc);
    const Tensor xlogx = where(zero, 0.0, mul(target, log(safe, loc), loc), loc);
    l = sub(xlogx, mul(target, input, loc), loc);
  }
  if (reduction != Reduction::BatchMean) return reduce_loss(l, reduction, "kl_div", loc);
  const Tensor total = sum(l, {}, false, loc);
  return input.dim() == 0 ? total : div(total, input.size(0), loc);
}

}  // namespace kiln
