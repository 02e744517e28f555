#include "kiln/optim/clip.h"

#include <cmath>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/join.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite, const Loc& loc) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      fail("clip_grad_norm_", loc, "expected defined tensors, but parameter {} is undefined", i);
    Tensor g = params[i].grad();
    if (g.defined()) grads.push_back(g);
  }
  if (!(norm_type > 0) && !std::isinf(norm_type))
    fail("clip_grad_norm_", loc, "expected norm_type > 0 or infinity, but got {}", norm_type);
  if (grads.empty()) return scalar_tensor(0.0);
  // PyTorch's order: one norm per gradient, then the norm of those norms (in the first
  // gradient's dtype).
  const DType dtype = grads[0].dtype();
  std::vector<Tensor> norms;
  for (const Tensor& g : grads) {
    Tensor n = std::isinf(norm_type) ? max(abs(g.detach(), loc), {}, false, loc)
                                     : norm(g.detach(), norm_type, {}, false, loc);
    norms.push_back(to_dtype(n, dtype, loc));
  }
  Tensor stacked = stack(norms, 0, loc);
  Tensor total = std::isinf(norm_type) ? max(stacked, {}, false, loc)
                                       : norm(stacked, norm_type, {}, false, loc);
  if (error_if_nonfinite && !std::isfinite(total.item()))
    fail("clip_grad_norm_", loc,
         "expected a finite total norm of order {} of the gradients, but got {}, so they cannot "
         "be clipped (pass error_if_nonfinite = false to clip anyway)",
         norm_type, total.item());
  // max_norm / (total + 1e-6) as PyTorch evaluates it: (1 / (total + 1e-6)) * max_norm.
  Tensor coef =
      clamp(mul(div(1.0, add(total, 1e-6, loc), loc), max_norm, loc), std::nullopt, 1.0, loc);
  for (Tensor& g : grads) {
    Tensor cut = g.detach();
    cut.mul_(coef, loc);  // a zero-dim factor keeps the gradient's dtype
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value, const Loc& loc) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      fail("clip_grad_value_", loc, "expected defined tensors, but parameter {} is undefined", i);
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    Tensor cut = g.detach();
    cut.clamp_(-clip_value, clip_value, loc);
  }
}

}  // namespace kiln::optim
