// Note [size-free backward] (kiln/ops/op.h), walked over the registry: every differentiable op
// sample whose inputs share a leading (batch) dim is traced with that dim symbolic, inside a
// function that computes kiln::grad of its outputs; the one trace must serve the sample's batch
// and twice it, equal to eager bit for bit. The ops that cannot yet are listed below with their
// reason: the test fails when one of them starts to work (so the list stays true) and when any
// other op cannot.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "kiln/graph/function.h"
#include "kiln/kiln.h"
#include "tests/support/registry_cases.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Case = test::RegistryCase;
using Tensors = std::vector<Tensor>;

// Samples ("op/sample") that cannot serve two batches from one trace, with the reason.
const std::map<std::string, std::string>& known_limits() {
  static const std::map<std::string, std::string> limits = {
      {"chunk/chunk/uneven",
       "the pieces are cut at SymInt offsets now, but the last piece has 3 rows at both probe "
       "sizes (11 -> 4+4+3, 13 -> 5+5+3), so the probe diff takes its dim for static and its "
       "gradient's expand keeps 3 (the coincidence limit of Note [symbolic dims])"},
      {"unflatten/inferred_size_of_a_transpose",
       "the sample needs an even size in the batch dim, and the probe sizes are odd (11, 13)"},
  };
  return limits;
}

// Which inputs carry the batch: rank >= 1 and dim 0 equal to that of the first differentiated
// input. Empty when the first differentiated input has no dims.
std::vector<bool> batched_inputs(const OpSample& s, const std::vector<int>& diff) {
  std::vector<bool> batched(s.inputs.size(), false);
  const Tensor& first = s.inputs[static_cast<size_t>(diff[0])];
  if (first.dim() == 0 || first.dim_size(0) == 0) return {};
  for (size_t i = 0; i < s.inputs.size(); ++i)
    batched[i] = s.inputs[i].dim() >= 1 && s.inputs[i].dim_size(0) == first.dim_size(0);
  return batched;
}

std::vector<int> differentiated(const OpSample& s) {
  if (!s.grad_inputs.empty()) return s.grad_inputs;
  std::vector<int> out;
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (is_floating(s.inputs[i].dtype())) out.push_back(static_cast<int>(i));
  return out;
}

// The sample's program with its gradients: outputs, then d(sum of squares)/d(each input).
Tensors with_grads(const OpSample& s, const std::vector<int>& diff, const Tensors& in) {
  Tensors args = in;
  Tensors leaves;
  for (int i : diff) {
    args[static_cast<size_t>(i)] = detach(in[static_cast<size_t>(i)]).set_requires_grad(true);
    leaves.push_back(args[static_cast<size_t>(i)]);
  }
  Tensors outs = s.fn(args);
  Tensor loss;
  for (const Tensor& o : outs) {
    if (!o.defined() || !is_floating(o.dtype()) || !o.requires_grad()) continue;
    const Tensor term = sum(mul(o, o));
    loss = loss.defined() ? add(loss, term) : term;
  }
  if (!loss.defined()) return outs;
  Tensors grads = kiln::grad({loss}, leaves, {}, false, false, /*allow_unused=*/true);
  for (Tensor& g : grads) outs.push_back(g.defined() ? g : zeros({0}));
  return outs;
}

// Inputs at twice the batch: each batched input concatenated with itself (index inputs stay in
// range), the others as they are.
Tensors doubled(const OpSample& s, const std::vector<bool>& batched) {
  Tensors out;
  for (size_t i = 0; i < s.inputs.size(); ++i)
    out.push_back(batched[i] ? contiguous(cat({s.inputs[i], s.inputs[i]}, 0)) : s.inputs[i]);
  return out;
}

// Why the sample cannot be checked here at all (not an op's limit); empty when it can.
std::string not_applicable(const OpSample& s, const std::vector<int>& diff,
                           const std::vector<bool>& batched) {
  if (!s.check_grad || !s.runs_on_meta) return "no gradient to check / needs memory";
  if (diff.empty()) return "no floating input";
  if (batched.empty()) return "no leading dim";
  for (const Tensor& t : s.inputs)
    if (t.is_view() || !t.is_contiguous()) return "a strided input";
  try {
    manual_seed(7);
    with_grads(s, diff, doubled(s, batched));
  } catch (const Error&) {
    return "eager refuses the doubled batch";  // dim 0 is not a batch for this op
  }
  return "";
}

// Traces once and checks both batches; returns the reason it cannot (the first error line, or
// the number of traces), or nullopt when it works.
std::optional<std::string> trace_and_check(const OpSample& s, const std::vector<int>& diff,
                                           const std::vector<bool>& batched) {
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    SymShape shape = static_shape(s.inputs[i].shape());
    if (batched[i]) shape[0] = Dim{0, "batch"};
    specs.emplace_back(shape, s.inputs[i].dtype(), "a" + std::to_string(i));
  }
  std::optional<Function> f;
  try {
    f.emplace(function([&](const Tensors& in) { return with_grads(s, diff, in); }, specs,
                       {.name = s.label, .on_retrace = RetracePolicy::kError, .optimize = false}));
    for (const Tensors& in : {s.inputs, doubled(s, batched)}) {
      manual_seed(7);
      const Tensors want = with_grads(s, diff, in);
      manual_seed(7);
      const Tensors got = (*f)(in);
      EXPECT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
        SCOPED_TRACE(s.label + " output " + std::to_string(i) + " at batch " +
                     std::to_string(in[0].dim() ? in[0].dim_size(0) : 0));
        test::expect_bit_identical(got[i], want[i]);
      }
    }
  } catch (const Error& e) {
    std::string what = e.what();
    return what.substr(0, what.find('\n'));
  }
  if (f->stats().traces != 1) return std::to_string(f->stats().traces) + " traces";
  return std::nullopt;
}

class RegistrySymGrad : public ::testing::TestWithParam<Case> {};

TEST_P(RegistrySymGrad, OneTraceOfTheGradientServesTwoBatches) {
  const Case& c = GetParam();
  const OpSample& s = c.sample;
  const std::vector<int> diff = differentiated(s);
  const std::vector<bool> batched = diff.empty() ? std::vector<bool>{} : batched_inputs(s, diff);
  if (const std::string na = not_applicable(s, diff, batched); !na.empty()) GTEST_SKIP() << na;
  const std::optional<std::string> failure = trace_and_check(s, diff, batched);
  const auto known = known_limits().find(c.op + "/" + s.label);
  if (known == known_limits().end()) {
    EXPECT_FALSE(failure.has_value()) << c.op << "/" << s.label << ": " << *failure;
  } else {
    EXPECT_TRUE(failure.has_value()) << c.op << " is listed as baking a size (" << known->second
                                     << ") but its sample traces now: take it off known_limits()";
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, RegistrySymGrad, ::testing::ValuesIn(test::registry_cases()),
                         test::registry_case_name);

}  // namespace
}  // namespace kiln::graph
