// Registry samples of the ops defined in kiln/ops/reduce_stats.cpp (Note [op registry]).
#include <limits>
#include <string>
#include <vector>

#include "kiln/ops/binary.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/unary.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

OpSample sample(std::string label, std::vector<Tensor> in, Fn fn, std::string torch) {
  return {std::move(label), std::move(in), std::move(fn), std::move(torch), {}, true};
}

std::vector<OpSample> moment_samples(Tensor (*f)(const Tensor&, const Dims&, int64_t, bool,
                                                 const Loc&),
                                     const std::string& name) {
  auto call = [f](Dims dims, int64_t correction, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{f(in[0], dims, correction, keepdim, Loc::current())};
    };
  };
  const std::string t = "torch." + name + "(a0";
  return {
      sample("dim_biased", {sample_tensor({3, 4}, 51)}, call({1}, 0, false),
             t + ", dim=1, correction=0)"),
      sample("dims_keepdim", {sample_tensor({2, 3, 4}, 52)}, call({0, -1}, 1, true),
             t + ", dim=(0, -1), correction=1, keepdim=True)"),
      sample("all", {sample_tensor({3, 4}, 53)}, call({}, 1, false), t + ")"),
      sample("correction_2", {sample_tensor({4, 3}, 54).t()}, call({-1}, 2, false),
             t + ", dim=-1, correction=2)"),
  };
}

KILN_REGISTER_OP_SAMPLES("var", [] { return moment_samples(&var, "var"); });
KILN_REGISTER_OP_SAMPLES("std", [] { return moment_samples(&kiln::std, "std"); });

KILN_REGISTER_OP_SAMPLES("logsumexp", [] {
  auto call = [](Dims dims, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{logsumexp(in[0], dims, keepdim)};
    };
  };
  return std::vector<OpSample>{
      sample("dims_keepdim", {sample_tensor({2, 3, 4}, 61, -3, 3)}, call({0, 2}, true),
             "torch.logsumexp(a0, dim=(0, 2), keepdim=True)"),
      sample("negative_dim", {sample_tensor({3, 5}, 62, -3, 3)}, call({-1}, false),
             "torch.logsumexp(a0, dim=-1)"),
      sample("large_values", {sample_tensor({2, 4}, 63, 500, 510)}, call({1}, false),
             "torch.logsumexp(a0, dim=1)"),
  };
});

KILN_REGISTER_OP_SAMPLES("norm", [] {
  auto call = [](double p, Dims dims, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{norm(in[0], p, dims, keepdim)};
    };
  };
  // Values kept away from 0, where |x| has a kink.
  auto x = [](uint64_t seed) {
    return mul(sign(sample_tensor({3, 4}, seed)), sample_tensor({3, 4}, seed + 100, 0.2, 1.0));
  };
  return std::vector<OpSample>{
      sample("p2_all", {sample_tensor({3, 4}, 71)}, call(2.0, {}, false),
             "torch.linalg.vector_norm(a0)"),
      sample("p1_dim", {x(72)}, call(1.0, {1}, true),
             "torch.linalg.vector_norm(a0, ord=1, dim=1, keepdim=True)"),
      sample("p3_dim", {x(73)}, call(3.0, {1}, false),
             "torch.linalg.vector_norm(a0, ord=3, dim=1)"),
      sample("pinf_dims", {x(74)}, call(std::numeric_limits<double>::infinity(), {0, 1}, false),
             "torch.linalg.vector_norm(a0, ord=float('inf'), dim=(0, 1))"),
  };
});

}  // namespace

}  // namespace kiln
