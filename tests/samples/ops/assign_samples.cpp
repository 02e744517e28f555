// Registry samples of the ops defined in kiln/ops/assign.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/assign.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> copy_samples() {
  auto copy = [](const std::vector<Tensor>& in) {
    Tensor dst = in[0].detach().clone();
    assign(dst, in[1]);
    return std::vector<Tensor>{dst};
  };
  return {
      {"same_shape", {sample_tensor({2, 3}, 701), sample_tensor({2, 3}, 702)}, copy, "", {}, false},
      {"into_a_transpose",
       {sample_tensor({3, 2}, 703).t(), sample_tensor({2, 3}, 704)},
       copy,
       "",
       {},
       false},
      {"zero_dim_source", {sample_tensor({4}, 705), sample_tensor({}, 706)}, copy, "", {}, false},
  };
}
KILN_REGISTER_OP_SAMPLES("copy_", copy_samples);

KILN_REGISTER_OP_SAMPLES("fill_", [] {
  auto fill = [](double v) {
    return [v](const std::vector<Tensor>& in) {
      Tensor dst = in[0].detach().clone();
      assign_fill(dst, v);
      return std::vector<Tensor>{dst};
    };
  };
  return std::vector<OpSample>{
      {"value", {sample_tensor({2, 3}, 707)}, fill(2.5), "", {}, false},
      {"negative_zero_dim", {sample_tensor({}, 708)}, fill(-1.0), "", {}, false},
  };
});

}  // namespace

}  // namespace kiln
