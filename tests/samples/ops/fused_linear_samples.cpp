// Registry samples of fused_linear (kiln/ops/fused_linear.cpp, Note [op registry]): float64
// (the chain's kernels, gradchecked) and float32 (oneDNN's matmul with post-ops).
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/ops/fused_linear.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> fused_linear_samples() {
  auto call = [](std::string activation, bool bias) {
    return [activation, bias](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{fused_linear(x[0], x[1], bias ? x[2] : Tensor(), activation)};
    };
  };
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed); };
  auto f32 = [&](Shape s, uint64_t seed) {
    return to_dtype(t(std::move(s), seed), DType::Float32);
  };
  return {
      {"fused_linear/relu", {t({3, 4}, 61), t({5, 4}, 62), t({5}, 63)}, call("relu", true)},
      {"fused_linear/batched_no_bias", {t({2, 3, 4}, 64), t({5, 4}, 65)}, call("relu", false)},
      {"fused_linear/none_one_value_bias",
       {t({3, 4}, 66), t({5, 4}, 67), t({1}, 68)},
       call("none", true)},
      {"fused_linear/float32_relu",
       {f32({6, 4}, 69), f32({5, 4}, 70), f32({5}, 71)},
       call("relu", true),
       "",
       {},
       false},
      {"fused_linear/float32_batched_one_value_bias",
       {f32({2, 3, 4}, 72), f32({5, 4}, 73), f32({1}, 74)},
       call("none", true),
       "",
       {},
       false},
  };
}

KILN_REGISTER_OP_SAMPLES("fused_linear", fused_linear_samples);

}  // namespace

}  // namespace kiln
