// Statistics composed of the primitive reductions (reduce.cpp): var, std, logsumexp and norm.
// They have no Op of their own; autograd flows through their parts, arranged so that the
// gradients are PyTorch's also at the singular points (zero norms, zero deviations).
#include <cmath>
#include <limits>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/reduce_ops.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {
void require_floating(const char* op, const Tensor& x, const Loc& loc) {
  if (!is_floating(x.dtype()))
    fail(op, loc, "expected a floating-point input, but got {}", x.describe());
}

// Note [zero-safe powers]: x^e for e > 0 has the derivative e x^(e-1), infinite at x = 0 when
// e < 1, and the chain rule multiplies it by a zero (the 2x of a squared norm, the sign of |x|),
// giving nan. PyTorch's norm and std backward define the gradient there as 0; so does this:
// x^e where x != 0, and exactly 0 with a zero gradient where x == 0.
Tensor pow_zero_safe(const Tensor& x, double e, const Loc& loc) {
  const Tensor zero = eq(x, 0.0, loc);
  const Tensor safe = where(zero, 1.0, x, loc);
  return where(zero, 0.0, e == 0.5 ? sqrt(safe, loc) : pow(safe, e, loc), loc);
}
}  // namespace

// Two passes (mean, then squared deviations) rather than sum(x^2) - n*mean^2, which cancels.
// The divisor is max(0, N - correction), so too few elements give inf or nan like PyTorch. The
// gradient is PyTorch's, 2 (x - mean) / (N - correction): with correction > N it is finite although
// the value is inf (the divisor is clamped only in the value).
Tensor var(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim, const Loc& loc) {
  require_floating("var", x, loc);
  detail::ReduceDims rd = detail::normalize_reduce_dims("var", x, dims, keepdim, loc);
  SymInt count = 1;  // a size, so a trace divides by each call's count (Note [size lists])
  for (int64_t d : rd.dims) count = count * x.size(d);
  const SymInt dof = count - correction;
  // With dof <= 0 the gradient is PyTorch's formula exactly, which does not pass through the
  // mean (its share is 0 analytically, but inf - inf = nan numerically).
  Tensor m = mean(x, dims, true, loc);
  Tensor d = sub(x, dof > 0 ? m : detach(m), loc);
  Tensor ss = sum(mul(d, d, loc), dims, keepdim, loc);
  if (dof >= 0) return div(ss, dof, loc);
  const Tensor for_grad = div(ss, dof, loc);
  return add(detach(div(ss, 0.0, loc)), sub(for_grad, detach(for_grad), loc), loc);
}

// The gradient where std is 0 (a constant or single-element reduction) is 0, as PyTorch's.
Tensor std(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim, const Loc& loc) {
  require_floating("std", x, loc);
  return pow_zero_safe(var(x, dims, correction, keepdim, loc), 0.5, loc);
}

// Note [logsumexp shift]: m = max(x) is subtracted before exp so that nothing overflows. It is
// taken without gradient: the result does not depend on m, and the gradient through the rest
// is already softmax(x). Infinite maxima are replaced by 0 (as PyTorch does) so that a row of
// all -inf gives -inf instead of nan.
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  detail::ReduceDims rd = detail::normalize_reduce_dims("logsumexp", x, dims, keepdim, loc);
  if (rd.count == 0) return log(sum(exp(x, loc), dims, keepdim, loc), loc);
  Tensor m;
  {
    NoGradGuard no_grad;
    m = max(x, dims, true, loc);
    m = where(eq(abs(m, loc), std::numeric_limits<double>::infinity(), loc), 0.0, m, loc);
  }
  Tensor s = log(sum(exp(sub(x, m, loc), loc), dims, keepdim, loc), loc);
  if (!keepdim)  // squeezed, not reshaped to out_shape, so no size is written (a traced batch)
    for (auto d = rd.dims.rbegin(); d != rd.dims.rend(); ++d) m = squeeze(m, *d, loc);
  return add(s, m, loc);
}

// p = 2 and p = 1 avoid pow for speed and exactness; p = 0 counts non-zeros (no gradient).
// For p > 0 the gradient at zero entries and at a zero norm is 0, as PyTorch's (Note [zero-safe
// powers]), not nan.
Tensor norm(const Tensor& x, double p, const Dims& dims, bool keepdim, const Loc& loc) {
  require_floating("norm", x, loc);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (p == 2.0) return pow_zero_safe(sum(mul(x, x, loc), dims, keepdim, loc), 0.5, loc);
  if (p == 1.0) return sum(abs(x, loc), dims, keepdim, loc);
  if (p == kInf) return max(abs(x, loc), dims, keepdim, loc);
  if (p == -kInf) return min(abs(x, loc), dims, keepdim, loc);
  if (p == 0.0) return to_dtype(sum(ne(x, 0.0, loc), dims, keepdim, loc), x.dtype(), loc);
  if (p > 0.0)
    return pow_zero_safe(sum(pow_zero_safe(abs(x, loc), p, loc), dims, keepdim, loc), 1.0 / p, loc);
  return pow(sum(pow(abs(x, loc), p, loc), dims, keepdim, loc), 1.0 / p, loc);
}

}  // namespace kiln
