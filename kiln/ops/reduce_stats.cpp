// Statistics composed of the primitive reductions (reduce.cpp): var, std, logsumexp and norm.
// They have no Op of their own; autograd flows through their parts.
#include <cmath>
#include <limits>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/reduce_kernels.h"
#include "kiln/ops/registry.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {
void require_floating(const char* op, const Tensor& x, const Loc& loc) {
  if (!is_floating(x.dtype()))
    fail(op, loc, "expected a floating-point input, but got {}", x.describe());
}
}  // namespace

// Two passes (mean, then squared deviations) rather than sum(x^2) - n*mean^2, which cancels.
// The divisor is max(0, N - correction), so too few elements give inf or nan like PyTorch.
Tensor var(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim, const Loc& loc) {
  require_floating("var", x, loc);
  detail::ReduceDims rd = detail::normalize_reduce_dims("var", x, dims, keepdim, loc);
  Tensor d = sub(x, mean(x, dims, true, loc), loc);
  Tensor ss = sum(mul(d, d, loc), dims, keepdim, loc);
  return div(ss, static_cast<double>(std::max<int64_t>(0, rd.count - correction)), loc);
}

Tensor std(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim, const Loc& loc) {
  require_floating("std", x, loc);
  return sqrt(var(x, dims, correction, keepdim, loc), loc);
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
  return add(s, keepdim ? m : reshape(m, rd.out_shape, loc), loc);
}

// p = 2 and p = 1 avoid pow for speed and exactness; p = 0 counts non-zeros (no gradient).
// At x = 0 the p = 2 gradient is nan (sqrt'(0) * 0), where PyTorch special-cases it to 0.
Tensor norm(const Tensor& x, double p, const Dims& dims, bool keepdim, const Loc& loc) {
  require_floating("norm", x, loc);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (p == 2.0) return sqrt(sum(mul(x, x, loc), dims, keepdim, loc), loc);
  if (p == 1.0) return sum(abs(x, loc), dims, keepdim, loc);
  if (p == kInf) return max(abs(x, loc), dims, keepdim, loc);
  if (p == -kInf) return min(abs(x, loc), dims, keepdim, loc);
  if (p == 0.0) return to_dtype(sum(ne(x, 0.0, loc), dims, keepdim, loc), x.dtype(), loc);
  return pow(sum(pow(abs(x, loc), p, loc), dims, keepdim, loc), 1.0 / p, loc);
}

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

OpSample sample(std::string label, std::vector<Tensor> in, Fn fn, std::string torch) {
  return {std::move(label), std::move(in), std::move(fn), std::move(torch), {}, true};
}

std::vector<OpSample> moment_samples(Tensor (*f)(const Tensor&, const Dims&, int64_t, bool,
                                                 const Loc&),
                                     const std::string& name) {
  auto call = [f](Dims dims, int64_t correction, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{f(in[0], dims, correction, keepdim, Loc::current())};
    };
  };
  const std::string t = "torch." + name + "(a0";
  return {
      sample("dim_biased", {sample_tensor({3, 4}, 51)}, call({1}, 0, false),
             t + ", dim=1, correction=0)"),
      sample("dims_keepdim", {sample_tensor({2, 3, 4}, 52)}, call({0, -1}, 1, true),
             t + ", dim=(0, -1), correction=1, keepdim=True)"),
      sample("all", {sample_tensor({3, 4}, 53)}, call({}, 1, false), t + ")"),
      sample("correction_2", {sample_tensor({4, 3}, 54).t()}, call({-1}, 2, false),
             t + ", dim=-1, correction=2)"),
  };
}

KILN_REGISTER_OP_SAMPLES("var", [] { return moment_samples(&var, "var"); });
KILN_REGISTER_OP_SAMPLES("std", [] { return moment_samples(&kiln::std, "std"); });

KILN_REGISTER_OP_SAMPLES("logsumexp", [] {
  auto call = [](Dims dims, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{logsumexp(in[0], dims, keepdim)};
    };
  };
  return std::vector<OpSample>{
      sample("dims_keepdim", {sample_tensor({2, 3, 4}, 61, -3, 3)}, call({0, 2}, true),
             "torch.logsumexp(a0, dim=(0, 2), keepdim=True)"),
      sample("negative_dim", {sample_tensor({3, 5}, 62, -3, 3)}, call({-1}, false),
             "torch.logsumexp(a0, dim=-1)"),
      sample("large_values", {sample_tensor({2, 4}, 63, 500, 510)}, call({1}, false),
             "torch.logsumexp(a0, dim=1)"),
  };
});

KILN_REGISTER_OP_SAMPLES("norm", [] {
  auto call = [](double p, Dims dims, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{norm(in[0], p, dims, keepdim)};
    };
  };
  // Values kept away from 0, where |x| has a kink.
  auto x = [](uint64_t seed) {
    return mul(sign(sample_tensor({3, 4}, seed)), sample_tensor({3, 4}, seed + 100, 0.2, 1.0));
  };
  return std::vector<OpSample>{
      sample("p2_all", {sample_tensor({3, 4}, 71)}, call(2.0, {}, false),
             "torch.linalg.vector_norm(a0)"),
      sample("p1_dim", {x(72)}, call(1.0, {1}, true),
             "torch.linalg.vector_norm(a0, ord=1, dim=1, keepdim=True)"),
      sample("p3_dim", {x(73)}, call(3.0, {1}, false),
             "torch.linalg.vector_norm(a0, ord=3, dim=1)"),
      sample("pinf_dims", {x(74)}, call(std::numeric_limits<double>::infinity(), {0, 1}, false),
             "torch.linalg.vector_norm(a0, ord=float('inf'), dim=(0, 1))"),
  };
});

}  // namespace

}  // namespace kiln
