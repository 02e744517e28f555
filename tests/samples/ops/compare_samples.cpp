// Registry samples of the ops defined in kiln/ops/compare.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/compare.h"
#include "kiln/ops/factories.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&, const Loc&);
using ScalarFn = Tensor (*)(const Tensor&, double, const Loc&);

OpSample bool_sample(std::string label, std::vector<Tensor> inputs,
                     std::function<Tensor(const std::vector<Tensor>&)> f, std::string torch) {
  OpSample s{std::move(label), std::move(inputs),
             [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; },
             std::move(torch)};
  s.check_grad = false;
  return s;
}

// Inputs with exact ties so that eq/le/ge see both outcomes.
std::vector<OpSample> compare_samples(const char* name, BinaryFn fn, ScalarFn scalar_fn) {
  std::string torch = std::string("torch.") + name;
  auto call = [fn](const std::vector<Tensor>& in) { return fn(in[0], in[1], Loc::current()); };
  Tensor ties = tensor<double>({0.5, -1.0, 2.0, 0.25, 3.0, -1.0}, Shape{2, 3});
  Tensor row = tensor<double>({0.5, 0.0, 2.0}, Shape{3});
  return {
      bool_sample("same_shape", {sample_tensor({3, 4}, 31), sample_tensor({3, 4}, 32)}, call,
                  torch + "(a0, a1)"),
      bool_sample("broadcast_ties", {ties, row}, call, torch + "(a0, a1)"),
      bool_sample("transposed", {sample_tensor({4, 3}, 33).t(), sample_tensor({3, 1}, 34)}, call,
                  torch + "(a0, a1)"),
      bool_sample(
          "scalar", {ties},
          [scalar_fn](const std::vector<Tensor>& in) {
            return scalar_fn(in[0], 0.25, Loc::current());
          },
          torch + "(a0, 0.25)"),
  };
}

std::vector<OpSample> logical_samples(const char* name, BinaryFn fn) {
  std::string torch = std::string("torch.") + name;
  auto call = [fn](const std::vector<Tensor>& in) { return fn(in[0], in[1], Loc::current()); };
  Tensor zeros_in = tensor<double>({0.0, 1.5, 0.0, -2.0, 0.0, 3.0}, Shape{2, 3});
  Tensor row = tensor<double>({0.0, 0.0, 4.0}, Shape{3});
  return {
      bool_sample("broadcast", {zeros_in, row}, call, torch + "(a0, a1)"),
      bool_sample("bool_and_float", {gt(sample_tensor({3, 4}, 35), 0.0), sample_tensor({4}, 36)},
                  call, torch + "(a0, a1)"),
      bool_sample("bools", {gt(sample_tensor({2, 3}, 37), 0.0), gt(sample_tensor({2, 1}, 38), 0.0)},
                  call, torch + "(a0, a1)"),
  };
}

#define KILN_COMPARE_SAMPLES(op) \
  KILN_REGISTER_OP_SAMPLES(#op, [] { return compare_samples(#op, &op, &op); })
KILN_COMPARE_SAMPLES(eq);
KILN_COMPARE_SAMPLES(ne);
KILN_COMPARE_SAMPLES(lt);
KILN_COMPARE_SAMPLES(le);
KILN_COMPARE_SAMPLES(gt);
KILN_COMPARE_SAMPLES(ge);
#undef KILN_COMPARE_SAMPLES

KILN_REGISTER_OP_SAMPLES("logical_and",
                         [] { return logical_samples("logical_and", &logical_and); });
KILN_REGISTER_OP_SAMPLES("logical_or", [] { return logical_samples("logical_or", &logical_or); });
KILN_REGISTER_OP_SAMPLES("logical_xor",
                         [] { return logical_samples("logical_xor", &logical_xor); });
std::vector<OpSample> logical_not_samples() {
  auto call = [](const std::vector<Tensor>& in) { return logical_not(in[0]); };
  return std::vector<OpSample>{
      bool_sample("float", {tensor<double>({0.0, 1.5, -2.0, 0.0}, Shape{2, 2})}, call,
                  "torch.logical_not(a0)"),
      bool_sample("bool_transposed", {gt(sample_tensor({3, 2}, 39), 0.0).t()}, call,
                  "torch.logical_not(a0)"),
  };
}
KILN_REGISTER_OP_SAMPLES("logical_not", logical_not_samples);

std::vector<OpSample> where_samples() {
  auto call = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{where(in[0], in[1], in[2])};
  };
  auto scalar_b = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{where(in[0], in[1], 0.5)};
  };
  auto scalar_a = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{where(in[0], -0.5, in[1])};
  };
  std::vector<OpSample> s = {
      {"same_shape",
       {gt(sample_tensor({3, 4}, 40), 0.0), sample_tensor({3, 4}, 41), sample_tensor({3, 4}, 42)},
       call,
       "torch.where(a0, a1, a2)",
       {1, 2}},
      {"broadcast_all",
       {gt(sample_tensor({3, 1}, 43), 0.0), sample_tensor({1, 4}, 44),
        sample_tensor({2, 1, 1}, 45)},
       call,
       "torch.where(a0, a1, a2)",
       {1, 2}},
      {"scalar_b",
       {gt(sample_tensor({2, 3}, 46), 0.0), sample_tensor({3}, 47)},
       scalar_b,
       "torch.where(a0, a1, 0.5)",
       {1}},
      {"scalar_a",
       {gt(sample_tensor({4, 2}, 48), 0.0).t(), sample_tensor({2, 4}, 49)},
       scalar_a,
       "torch.where(a0, -0.5, a1)",
       {1}},
  };
  return s;
}
KILN_REGISTER_OP_SAMPLES("where", where_samples);

}  // namespace

}  // namespace kiln
