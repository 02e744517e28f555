// Registry samples of running_stat_update, defined in kiln/ops/running_stats.cpp (Note [op
// registry]).
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "kiln/ops/norm_ops.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

// The running statistic is cloned, so that repeated calls do not compound the update; x is read
// for its shape only.
OpSample::Fn update(double momentum, bool unbiased) {
  return [=](const std::vector<Tensor>& in) {
    Tensor running = clone(detach(in[0]));
    detail::running_stat_update(running, detach(in[1]), in[2], momentum, unbiased);
    return std::vector<Tensor>{running};
  };
}

// The update in PyTorch, refusing what kiln's op refuses (torch._assert raises), with n the values
// per channel of a2 (x).
std::string torch_update(double momentum, bool unbiased) {
  const std::string m = std::to_string(momentum);
  const std::string scaled = unbiased ? "b * (n / (n - 1))" : "b";
  // An eval'd lambda sees only globals, so every tensor is an argument.
  return "(lambda r, b, x, n: (torch._assert(r.dim() == 1 and r.is_floating_point() and r.shape "
         "== b.shape and r.dtype == b.dtype and x.dim() >= 2 and x.shape[1] == r.shape[0], "
         "'running_stat_update'), (r * (1 - " +
         m + ") + " + scaled + " * " + m +
         ") if n > 0 else r.clone())[1])(a0, a1, a2, a2.numel() // max(a2.shape[1], 1) if "
         "a2.dim() >= 2 else 0)";
}

KILN_REGISTER_OP_SAMPLES("running_stat_update", [] {
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed, 0.5, 2); };
  return std::vector<OpSample>{
      {"mean",
       {t({3}, 361), t({3}, 362), t({4, 3, 2}, 363)},
       update(0.2, false),
       torch_update(0.2, false),
       {},
       false},
      // n = 4 * 2 values per channel: the batch variance is scaled by 8 / 7.
      {"unbiased_var",
       {t({3}, 364), t({3}, 365), t({4, 3, 2}, 366)},
       update(0.1, true),
       torch_update(0.1, true),
       {},
       false},
      // An empty batch leaves the statistic as it was.
      {"empty_batch",
       {t({2}, 367), t({2}, 368), t({0, 2, 5}, 369)},
       update(0.1, true),
       torch_update(0.1, true),
       {},
       false},
  };
});

}  // namespace

}  // namespace kiln
