// Registry samples of the ops defined in kiln/ops/matmul.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/linalg.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> matmul_samples() {
  auto mm = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{matmul(x[0], x[1])}; };
  const std::string torch = "torch.matmul(a0, a1)";
  auto sample = [&](std::string label, Shape sa, Shape sb) {
    return OpSample{"matmul/" + label, {sample_tensor(sa, 11), sample_tensor(sb, 12)}, mm, torch};
  };
  return {sample("dot", {4}, {4}),
          sample("2d_2d", {3, 4}, {4, 5}),
          sample("1d_left", {4}, {4, 5}),
          sample("1d_right", {3, 4}, {4}),
          sample("batched_2d", {2, 3, 4}, {4, 5}),
          sample("batched_1d", {2, 3, 4}, {4}),
          sample("broadcast", {2, 1, 3, 4}, {3, 4, 2}),
          sample("1d_batched", {4}, {2, 4, 3}),
          sample("2d_batched", {3, 4}, {2, 4, 5}),
          sample("batched_batched", {2, 3, 4}, {2, 4, 5}),
          sample("empty_n", {2, 3}, {3, 0}),
          sample("empty_k", {2, 0}, {0, 3})};
}

std::vector<OpSample> linear_samples() {
  auto with_bias = [](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{linear(x[0], x[1], x[2])};
  };
  auto no_bias = [](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{linear(x[0], x[1])};
  };
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed); };
  return {
      {"linear/2d",
       {t({3, 4}, 31), t({5, 4}, 32), t({5}, 33)},
       with_bias,
       "torch.nn.functional.linear(a0, a1, a2)"},
      {"linear/batched",
       {t({2, 3, 4}, 34), t({5, 4}, 35), t({5}, 36)},
       with_bias,
       "torch.nn.functional.linear(a0, a1, a2)"},
      {"linear/vector",
       {t({4}, 37), t({2, 4}, 38), t({2}, 39)},
       with_bias,
       "torch.nn.functional.linear(a0, a1, a2)"},
      {"linear/no_bias",
       {t({3, 4}, 40), t({5, 4}, 41)},
       no_bias,
       "torch.nn.functional.linear(a0, a1)"},
      {"linear/no_out_features",
       {t({2, 3}, 48), t({0, 3}, 49), t({0}, 50)},
       with_bias,
       "torch.nn.functional.linear(a0, a1, a2)"},
      {"linear/one_value_bias",
       {t({2, 3, 4}, 42), t({5, 4}, 43), t({1}, 44)},
       with_bias,
       "torch.nn.functional.linear(a0, a1, a2)"},
  };
}

KILN_REGISTER_OP_SAMPLES("matmul", matmul_samples);
KILN_REGISTER_OP_SAMPLES("linear", linear_samples);

}  // namespace

}  // namespace kiln
