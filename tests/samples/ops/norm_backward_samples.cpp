// Registry samples of batch_norm_backward, defined in kiln/ops/norm_backward.cpp
// (Note [op registry]).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/reduce.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

// The batch statistics the forward normalized with, from public ops.
std::vector<Tensor> stats(const Tensor& x) {
  Dims dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return {mean(x, dims), var(x, dims, 0)};
}

// The torch side: the gradient of F.batch_norm in training mode with respect to (x, w, b).
std::string torch_grad(bool weight) {
  const std::string w = weight ? "a2.detach().requires_grad_()" : "None";
  return fmt::format(
      "(lambda g, x, w, b: torch.autograd.grad(F.batch_norm(x, None, None, w, b, "
      "training=True, eps=1e-3), [t for t in (x, w, b) if t is not None], g))"
      "(a0, a1.detach().requires_grad_(), {}, torch.zeros(a1.shape[1], dtype=a1.dtype, "
      "requires_grad=True))",
      w);
}

OpSample sample(std::string label, Shape shape, bool weight, uint64_t seed) {
  std::vector<Tensor> inputs{sample_tensor(shape, seed), sample_tensor(shape, seed + 1, -2, 2)};
  if (weight) inputs.push_back(sample_tensor({shape[1]}, seed + 2, 0.5, 1.5));
  OpSample s{std::move(label), std::move(inputs),
             [weight](const std::vector<Tensor>& in) {
               NoGradGuard no_grad;
               const std::vector<Tensor> st = stats(in[1]);
               std::vector<Tensor> out =
                   batch_norm_backward(in[0], in[1], st[0], st[1], weight ? in[2] : Tensor(), 1e-3);
               if (!weight) out.erase(out.begin() + 1);  // torch returns no grad for w = None
               return out;
             },
             torch_grad(weight)};
  s.check_grad = false;  // the op is not differentiable (its vjp says why)
  return s;
}

KILN_REGISTER_OP_SAMPLES("batch_norm_backward", [] {
  return std::vector<OpSample>{sample("4d_weight", {3, 4, 3, 5}, true, 341),
                               sample("2d_no_weight", {6, 3}, false, 344),
                               sample("3d_odd_rows", {2, 3, 11}, true, 347)};
});

}  // namespace

}  // namespace kiln
