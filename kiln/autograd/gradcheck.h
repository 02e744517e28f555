#pragma once
#include <functional>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct GradcheckOptions {
  double eps = 1e-6;  // central-difference step
  double atol = 1e-5;
  double rtol = 1e-4;
  // Inputs to perturb; empty = every floating input.
  std::vector<int> inputs;
};

using TensorFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Compares the gradient computed by autograd with central finite differences in float64, along a
// fixed random projection of the outputs (L = sum_j <v_j, out_j>): for every element x_i of every
// checked input, dL/dx_i from backward must equal (L(x + eps e_i) - L(x - eps e_i)) / 2 eps within
// atol + rtol * |numerical|. Checked inputs must be float64. Throws kiln::Error naming the input,
// the element and both values on the first mismatch; returns true otherwise.
bool gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs,
               const GradcheckOptions& options = {}, const Loc& loc = Loc::current());

// gradcheck of the gradient itself: checks that backward with create_graph=true is differentiable
// (second derivatives), by running gradcheck on x -> grad(fn(x), x, v, create_graph=true).
bool gradgradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs,
                   const GradcheckOptions& options = {}, const Loc& loc = Loc::current());

}  // namespace kiln
