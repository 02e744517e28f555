// Registry samples of the ops defined in kiln/ops/reduce.cpp (Note [op registry]).
#include <optional>
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

OpSample sample(std::string label, std::vector<Tensor> in, Fn fn, std::string torch,
                bool check_grad = true) {
  return {std::move(label), std::move(in), std::move(fn), std::move(torch), {}, check_grad};
}

// Samples shared by sum/mean/max/min: same dim sets, torch expressions over `fn_name`.
std::vector<OpSample> dim_samples(Tensor (*f)(const Tensor&, const Dims&, bool, const Loc&),
                                  const std::string& torch_fn) {
  auto call = [f](Dims dims, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{f(in[0], dims, keepdim, Loc::current())};
    };
  };
  const std::string t = "torch." + torch_fn + "(a0";
  return {
      sample("dims_keepdim", {sample_tensor({2, 3, 4}, 11)}, call({0, 2}, true),
             t + ", dim=(0, 2), keepdim=True)"),
      sample("negative_dim", {sample_tensor({2, 3, 4}, 12)}, call({-1}, false), t + ", dim=-1)"),
      sample("all", {sample_tensor({3, 4}, 13)}, call({}, false), t + ")"),
      sample("transposed", {sample_tensor({5, 3}, 14).t()}, call({1}, true),
             t + ", dim=1, keepdim=True)"),
  };
}

KILN_REGISTER_OP_SAMPLES("sum", [] {
  auto v = dim_samples(&sum, "sum");
  v.push_back(sample(
      "zero_dim", {sample_tensor({}, 15)},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0], {0}, true)}; },
      "torch.sum(a0, dim=0, keepdim=True)"));
  return v;
});
KILN_REGISTER_OP_SAMPLES("mean", [] { return dim_samples(&mean, "mean"); });
KILN_REGISTER_OP_SAMPLES("max", [] {
  auto v = dim_samples(&max, "amax");
  // Two equal maxima: the central difference sees half the slope, which is the even share.
  v.push_back(sample(
      "two_ties", {tensor<double>({0.5, 0.9, -0.3, 0.9, 0.1, 0.2}, Shape{2, 3})},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{max(in[0])}; },
      "torch.amax(a0)"));
  return v;
});
KILN_REGISTER_OP_SAMPLES("min", [] { return dim_samples(&min, "amin"); });

KILN_REGISTER_OP_SAMPLES("prod", [] {
  auto call = [](Dims dims, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{prod(in[0], dims, keepdim)};
    };
  };
  // One row without zeros, one with a single zero, one with two.
  Tensor zeros = tensor<double>({0.5, 1.5, -0.8, 0.0, 1.2, 0.7, 0.0, 0.9, 0.0}, Shape{3, 3});
  return std::vector<OpSample>{
      sample("dims_keepdim", {sample_tensor({2, 3, 4}, 21, 0.5, 1.5)}, call({0, 2}, true),
             "torch.prod(torch.prod(a0, dim=2, keepdim=True), dim=0, keepdim=True)"),
      sample("negative_dim", {sample_tensor({2, 3, 4}, 22, -1.5, 1.5)}, call({-2}, false),
             "torch.prod(a0, dim=-2)"),
      sample("all", {sample_tensor({2, 3}, 23, 0.5, 1.5)}, call({}, false), "torch.prod(a0)"),
      sample("zeros", {zeros}, call({1}, false), "torch.prod(a0, dim=1)"),
  };
});

std::vector<OpSample> arg_samples(Tensor (*f)(const Tensor&, std::optional<int64_t>, bool,
                                              const Loc&),
                                  const std::string& name) {
  auto call = [f](std::optional<int64_t> dim, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{f(in[0], dim, keepdim, Loc::current())};
    };
  };
  const std::string t = "torch." + name + "(a0";
  return {
      sample("dim_keepdim", {sample_tensor({3, 4}, 31)}, call(1, true),
             t + ", dim=1, keepdim=True)", false),
      sample("negative_dim", {sample_tensor({2, 3, 4}, 32)}, call(-2, false), t + ", dim=-2)",
             false),
      sample("flattened", {sample_tensor({3, 4}, 33)}, call(std::nullopt, false), t + ")", false),
  };
}

KILN_REGISTER_OP_SAMPLES("argmax", [] { return arg_samples(&argmax, "argmax"); });
KILN_REGISTER_OP_SAMPLES("argmin", [] { return arg_samples(&argmin, "argmin"); });

KILN_REGISTER_OP_SAMPLES("sum_to", [] {
  auto call = [](Shape shape) -> Fn {
    return [=](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum_to(in[0], shape)}; };
  };
  return std::vector<OpSample>{
      sample("leading_and_inner", {sample_tensor({2, 3, 4}, 41)}, call({3, 1}),
             "a0.sum_to_size((3, 1))"),
      sample("keep_rank", {sample_tensor({2, 3, 4}, 42)}, call({1, 3, 1}),
             "a0.sum_to_size((1, 3, 1))"),
      sample("same_shape", {sample_tensor({2, 3}, 43)}, call({2, 3}), "a0.sum_to_size((2, 3))"),
  };
});

}  // namespace

}  // namespace kiln
