// Registry samples of the ops defined in kiln/ops/unary.cpp (Note [op registry]).
#include <optional>
#include <string>
#include <vector>

#include "kiln/ops/unary.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;

// Matrix, zero-dim, 3-d with a size-1 dim, and a transposed (non-contiguous) input.
std::vector<OpSample> unary_samples(UnaryFn f, const std::string& torch, double low, double high) {
  auto call = [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; };
  return {
      {"matrix", {sample_tensor({3, 4}, 11, low, high)}, call, torch + "(a0)"},
      {"zero_dim", {sample_tensor({}, 12, low, high)}, call, torch + "(a0)"},
      {"rank3", {sample_tensor({2, 1, 5}, 13, low, high)}, call, torch + "(a0)"},
      {"transposed", {sample_tensor({4, 3}, 14, low, high).t()}, call, torch + "(a0)"},
  };
}

template <Tensor (*F)(const Tensor&, const Loc&)>
Tensor plain(const Tensor& x) {
  return F(x, Loc::current());
}

KILN_REGISTER_OP_SAMPLES("neg", [] { return unary_samples(plain<neg>, "torch.neg", -1, 1); });
KILN_REGISTER_OP_SAMPLES("abs", [] { return unary_samples(plain<abs>, "torch.abs", -1, 1); });
KILN_REGISTER_OP_SAMPLES("sign", [] { return unary_samples(plain<sign>, "torch.sign", -1, 1); });
KILN_REGISTER_OP_SAMPLES("exp", [] { return unary_samples(plain<exp>, "torch.exp", -2, 2); });
KILN_REGISTER_OP_SAMPLES("log", [] { return unary_samples(plain<log>, "torch.log", 0.5, 2); });
KILN_REGISTER_OP_SAMPLES("log1p",
                         [] { return unary_samples(plain<log1p>, "torch.log1p", -0.5, 2); });
KILN_REGISTER_OP_SAMPLES("sqrt", [] { return unary_samples(plain<sqrt>, "torch.sqrt", 0.5, 2); });
KILN_REGISTER_OP_SAMPLES("rsqrt",
                         [] { return unary_samples(plain<rsqrt>, "torch.rsqrt", 0.5, 2); });
KILN_REGISTER_OP_SAMPLES("sin", [] { return unary_samples(plain<sin>, "torch.sin", -3, 3); });
KILN_REGISTER_OP_SAMPLES("cos", [] { return unary_samples(plain<cos>, "torch.cos", -3, 3); });
KILN_REGISTER_OP_SAMPLES("tanh", [] { return unary_samples(plain<tanh>, "torch.tanh", -2, 2); });
KILN_REGISTER_OP_SAMPLES("sigmoid",
                         [] { return unary_samples(plain<sigmoid>, "torch.sigmoid", -3, 3); });
KILN_REGISTER_OP_SAMPLES("relu", [] { return unary_samples(plain<relu>, "torch.relu", -1, 1); });
KILN_REGISTER_OP_SAMPLES("silu", [] {
  return unary_samples(plain<silu>, "torch.nn.functional.silu", -3, 3);
});
KILN_REGISTER_OP_SAMPLES("erf", [] {
  return unary_samples([](const Tensor& x) { return erf(x); }, "torch.erf", -2, 2);
});

std::vector<OpSample> gelu_samples() {
  auto samples =
      unary_samples([](const Tensor& x) { return gelu(x); }, "torch.nn.functional.gelu", -3, 3);
  auto tanh_samples = unary_samples([](const Tensor& x) { return gelu(x, "tanh"); },
                                    "torch.nn.functional.gelu", -3, 3);
  for (OpSample& s : tanh_samples) {
    s.label = "tanh_" + s.label;
    s.torch.insert(s.torch.size() - 1, ", approximate='tanh'");
    samples.push_back(std::move(s));
  }
  return samples;
}
KILN_REGISTER_OP_SAMPLES("gelu", gelu_samples);

std::vector<OpSample> softplus_samples() {
  auto samples = unary_samples([](const Tensor& x) { return softplus(x); },
                               "torch.nn.functional.softplus", -3, 3);
  // beta * x crosses the threshold inside the range, so both branches are exercised.
  auto call = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{softplus(in[0], 2.0, 1.5)};
  };
  samples.push_back({"beta_threshold",
                     {sample_tensor({4, 5}, 15, -2, 2)},
                     call,
                     "torch.nn.functional.softplus(a0, beta=2.0, threshold=1.5)"});
  return samples;
}
KILN_REGISTER_OP_SAMPLES("softplus", softplus_samples);

std::vector<OpSample> clamp_samples() {
  auto both = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{clamp(in[0], -0.5, 0.5)};
  };
  auto lo = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{clamp(in[0], 0.25, std::nullopt)};
  };
  auto hi = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{clamp(in[0], std::nullopt, -0.25)};
  };
  return std::vector<OpSample>{
      {"min_max", {sample_tensor({3, 4}, 16)}, both, "torch.clamp(a0, min=-0.5, max=0.5)"},
      {"min_only", {sample_tensor({2, 3, 2}, 17)}, lo, "torch.clamp(a0, min=0.25)"},
      {"max_only_transposed", {sample_tensor({4, 3}, 18).t()}, hi, "torch.clamp(a0, max=-0.25)"},
  };
}
KILN_REGISTER_OP_SAMPLES("clamp", clamp_samples);

std::vector<OpSample> pow_samples() {
  auto with = [](double e) {
    return [e](const std::vector<Tensor>& in) { return std::vector<Tensor>{pow(in[0], e)}; };
  };
  return std::vector<OpSample>{
      {"fractional", {sample_tensor({3, 4}, 19, 0.5, 2)}, with(2.5), "torch.pow(a0, 2.5)"},
      {"negative", {sample_tensor({2, 3}, 20, 0.5, 2)}, with(-1.5), "torch.pow(a0, -1.5)"},
      {"cube", {sample_tensor({2, 1, 3}, 21, -1, 1)}, with(3.0), "torch.pow(a0, 3.0)"},
      {"square_zero_dim", {sample_tensor({}, 22, -1, 1)}, with(2.0), "torch.pow(a0, 2.0)"},
      {"zero", {sample_tensor({4}, 23, -1, 1)}, with(0.0), "torch.pow(a0, 0.0)"},
  };
}
KILN_REGISTER_OP_SAMPLES("pow_scalar", pow_samples);

}  // namespace

}  // namespace kiln
