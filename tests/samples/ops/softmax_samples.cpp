// Registry samples of the ops defined in kiln/ops/softmax.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/softmax.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> softmax_samples(Tensor (*f)(const Tensor&, int64_t, const Loc&),
                                      const std::string& name) {
  auto call = [f](int64_t dim) {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{f(in[0], dim, Loc::current())};
    };
  };
  const std::string t = "torch." + name + "(a0, dim=";
  return {
      {"last_dim", {sample_tensor({3, 5}, 81, -2, 2)}, call(-1), t + "-1)"},
      {"middle_dim", {sample_tensor({2, 3, 4}, 82, -2, 2)}, call(1), t + "1)"},
      {"transposed", {sample_tensor({4, 3}, 83, -2, 2).t()}, call(1), t + "1)"},
      {"large_values", {sample_tensor({2, 4}, 84, 300, 305)}, call(0), t + "0)"},
  };
}

KILN_REGISTER_OP_SAMPLES("softmax", [] { return softmax_samples(&softmax, "softmax"); });
KILN_REGISTER_OP_SAMPLES("log_softmax",
                         [] { return softmax_samples(&log_softmax, "log_softmax"); });

}  // namespace

}  // namespace kiln
