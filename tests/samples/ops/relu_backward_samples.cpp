// Registry samples of the ops defined in kiln/ops/relu_backward.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/unary.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

KILN_REGISTER_OP_SAMPLES("relu_backward", [] {
  auto call = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{relu_backward(in[0], in[1])};
  };
  const std::string torch = "torch.ops.aten.threshold_backward(a0, a1, 0)";
  return std::vector<OpSample>{
      {"matrix", {sample_tensor({3, 4}, 21), sample_tensor({3, 4}, 22)}, call, torch},
      {"transposed", {sample_tensor({4, 3}, 23).t(), sample_tensor({3, 4}, 24)}, call, torch},
      {"zero_dim", {sample_tensor({}, 25), sample_tensor({}, 26, 0.2, 1)}, call, torch},
  };
});

}  // namespace

}  // namespace kiln
