#pragma once
#include <limits>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

// Scales the gradients of `params` in place so that their joint norm (the norm of all gradients
// concatenated) is at most max_norm; returns that total norm before clipping, as a zero-dim tensor
// of the gradients' dtype (torch.nn.utils.clip_grad_norm_). norm_type may be infinity (max |g|).
// The scale is max_norm / (total_norm + 1e-6), applied only where it is below 1. Parameters
// without a gradient are skipped; with none at all the result is 0. A non-finite total norm is an
// error when error_if_nonfinite, else the gradients end up non-finite, as in PyTorch.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false, const Loc& loc = Loc::current());

// Clamps every gradient of `params` to [-clip_value, clip_value] in place
// (torch.nn.utils.clip_grad_value_).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value,
                      const Loc& loc = Loc::current());

}  // namespace kiln::optim
