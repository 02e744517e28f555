// Registry samples of batch_norm_eval (batch norm in evaluation mode), defined in
// kiln/ops/batch_norm_eval.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/norm.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> batch_norm_eval_samples() {
  auto t = [](Shape s, uint64_t seed, double lo = -1, double hi = 1) {
    return sample_tensor(std::move(s), seed, lo, hi);
  };
  // Running statistics are buffers: they never require grad, so gradcheck leaves them alone.
  auto fn = [](bool weight, bool bias, double eps) {
    return [=](const std::vector<Tensor>& in) {
      const size_t b = weight ? 4 : 3;
      return std::vector<Tensor>{batch_norm(in[0], detach(in[1]), detach(in[2]),
                                            weight ? in[3] : Tensor(), bias ? in[b] : Tensor(),
                                            false, 0.1, eps)};
    };
  };
  return {
      {"batch_norm_eval/affine_4d",
       {t({2, 3, 2, 2}, 341, -2, 2), t({3}, 342), t({3}, 343, 0.5, 2), t({3}, 344, 0.5, 1.5),
        t({3}, 345)},
       fn(true, true, 1e-5),
       "F.batch_norm(a0, a1.detach(), a2.detach(), a3, a4, training=False)",
       {0, 3, 4}},
      {"batch_norm_eval/weight_only_2d_eps",
       {t({4, 3}, 346, -2, 2), t({3}, 347), t({3}, 348, 0.5, 2), t({3}, 349, 0.5, 1.5)},
       fn(true, false, 1e-3),
       "F.batch_norm(a0, a1.detach(), a2.detach(), a3, None, training=False, eps=1e-3)",
       {0, 3}},
      {"batch_norm_eval/no_affine_3d",
       {t({2, 3, 4}, 350, -2, 2), t({3}, 351), t({3}, 352, 0.5, 2)},
       fn(false, false, 1e-5),
       "F.batch_norm(a0, a1.detach(), a2.detach(), training=False)",
       {0}},
  };
}

KILN_REGISTER_OP_SAMPLES("batch_norm_eval", batch_norm_eval_samples);

}  // namespace

}  // namespace kiln
