// Registry samples of the ops defined in kiln/ops/linalg.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/linalg.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> bmm_samples() {
  return {
      {"bmm/basic",
       {sample_tensor({2, 3, 4}, 21), sample_tensor({2, 4, 5}, 22)},
       [](const std::vector<Tensor>& x) { return std::vector<Tensor>{bmm(x[0], x[1])}; },
       "torch.bmm(a0, a1)"},
      {"bmm/transposed",
       {sample_tensor({3, 4, 2}, 23), sample_tensor({3, 5, 4}, 24)},
       [](const std::vector<Tensor>& x) {
         return std::vector<Tensor>{bmm(transpose(x[0], 1, 2), transpose(x[1], -1, -2))};
       },
       "torch.bmm(a0.transpose(1, 2), a1.transpose(-1, -2))"},
  };
}

KILN_REGISTER_OP_SAMPLES("bmm", bmm_samples);

}  // namespace

}  // namespace kiln
