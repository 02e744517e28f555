// Registry samples of the ops defined in kiln/ops/conv_bn_fold.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/conv_bn_fold.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

OpSample::Fn fold_fn(bool has_weight, bool has_bias, bool has_conv_bias, double eps) {
  return [=](const std::vector<Tensor>& in) {
    size_t next = 2;
    auto optional = [&](bool has) { return has ? in[next++] : Tensor(); };
    const Tensor w = optional(has_weight), b = optional(has_bias), cb = optional(has_conv_bias);
    auto [scale, shift] = conv_bn_fold(in[0], in[1], w, b, cb, eps);
    return std::vector<Tensor>{scale, shift};
  };
}

// The torch expression builds both outputs through one torch.stack, so that each depends on
// every input, as the outputs of one kiln op do: both require grad when any input does (a
// composition would leave scale without grad when only the mean or a bias requires it).
std::string torch_fold(const std::string& scale, const std::string& shift) {
  return "tuple(t.clone() for t in torch.stack([" + scale + ", " + shift + "]))";
}

// Variances in [0.5, 2): away from the pole of 1 / sqrt(var + eps).
KILN_REGISTER_OP_SAMPLES("conv_bn_fold", [] {
  auto t = [](int64_t c, uint64_t seed) { return sample_tensor({c}, seed); };
  auto var = [](int64_t c, uint64_t seed) { return sample_tensor({c}, seed, 0.5, 2.0); };
  return std::vector<OpSample>{
      {"affine_conv_bias",
       {t(5, 381), var(5, 382), t(5, 383), t(5, 384), t(5, 385)},
       fold_fn(true, true, true, 1e-5),
       torch_fold("a2 / torch.sqrt(a1 + 1e-05)", "a3 + (a4 - a0) * (a2 / torch.sqrt(a1 + 1e-05))")},
      {"affine",
       {t(4, 386), var(4, 387), t(4, 388), t(4, 389)},
       fold_fn(true, true, false, 1e-3),
       torch_fold("a2 / torch.sqrt(a1 + 0.001)", "a3 - a0 * (a2 / torch.sqrt(a1 + 0.001))")},
      {"statistics_and_conv_bias",
       {t(3, 390), var(3, 391), t(3, 392)},
       fold_fn(false, false, true, 0.1),
       torch_fold("1 / torch.sqrt(a1 + 0.1)", "(a2 - a0) * (1 / torch.sqrt(a1 + 0.1))")},
  };
});

}  // namespace

}  // namespace kiln
