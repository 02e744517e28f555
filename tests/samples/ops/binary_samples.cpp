// Registry samples of the ops defined in kiln/ops/binary.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/binary.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> binary_samples(const char* name,
                                     Tensor (*fn)(const Tensor&, const Tensor&, const Loc&),
                                     double low, double high) {
  std::string torch = std::string("torch.") + name;
  auto call = [fn](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{fn(in[0], in[1], Loc::current())};
  };
  return {
      {"same_shape",
       {sample_tensor({3, 4}, 1, low, high), sample_tensor({3, 4}, 2, low, high)},
       call,
       torch + "(a0, a1)"},
      {"broadcast",
       {sample_tensor({2, 3, 1}, 3, low, high), sample_tensor({4}, 4, low, high)},
       call,
       torch + "(a0, a1)"},
      {"zero_dim",
       {sample_tensor({2, 3}, 5, low, high), sample_tensor({}, 6, low, high)},
       call,
       torch + "(a0, a1)"},
      {"transposed",
       {sample_tensor({4, 3}, 7, low, high).t(), sample_tensor({1, 4}, 8, low, high)},
       call,
       torch + "(a0, a1)"},
  };
}

KILN_REGISTER_OP_SAMPLES("add", [] { return binary_samples("add", &add, -1, 1); });
KILN_REGISTER_OP_SAMPLES("sub", [] { return binary_samples("sub", &sub, -1, 1); });
KILN_REGISTER_OP_SAMPLES("mul", [] { return binary_samples("mul", &mul, -1, 1); });
KILN_REGISTER_OP_SAMPLES("div", [] { return binary_samples("div", &div, 0.5, 2); });
KILN_REGISTER_OP_SAMPLES("pow", [] { return binary_samples("pow", &pow, 0.5, 2); });
KILN_REGISTER_OP_SAMPLES("maximum", [] { return binary_samples("maximum", &maximum, -1, 1); });
KILN_REGISTER_OP_SAMPLES("minimum", [] { return binary_samples("minimum", &minimum, -1, 1); });

}  // namespace

}  // namespace kiln
