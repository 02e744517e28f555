// The table-driven test of every registered op sample: meta inference matches eager, and
// (where differentiable) autograd matches finite differences. Ops added later are covered by
// registering samples beside their definition; nothing here changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kiln/autograd/gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/ops/dispatcher.h"
#include "tests/samples/registry.h"
#include "tests/support/op_recorder.h"
#include "tests/support/registry_cases.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using Case = test::RegistryCase;
using test::registry_case_name;

std::vector<Case> all_cases() {
  return test::registry_cases();
}

class Registry : public ::testing::TestWithParam<Case> {};

// Note [faithful meta]: the same call on meta copies of the inputs gives outputs of the same
// shape, dtype, strides and storage offset, sharing an input's storage where eager does.
void expect_meta_matches_eager(const OpSample& s, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> eager = s.fn(inputs);
  std::vector<Tensor> meta_inputs;
  for (const Tensor& t : inputs) meta_inputs.push_back(t.to(kMeta));
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(meta_inputs[i].strides(), inputs[i].strides()) << "to(kMeta) of input " << i;
    EXPECT_EQ(meta_inputs[i].storage_offset(), inputs[i].storage_offset()) << "input " << i;
  }
  std::vector<Tensor> meta = s.fn(meta_inputs);
  ASSERT_EQ(meta.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_TRUE(meta[i].is_meta());
    EXPECT_EQ(meta[i].shape(), eager[i].shape());
    EXPECT_EQ(meta[i].dtype(), eager[i].dtype());
    EXPECT_EQ(meta[i].strides(), eager[i].strides());
    EXPECT_EQ(meta[i].storage_offset(), eager[i].storage_offset());
    for (size_t j = 0; j < inputs.size(); ++j)
      EXPECT_EQ(meta[i].storage() == meta_inputs[j].storage(),
                eager[i].storage() == inputs[j].storage())
          << "aliasing of input " << j;
  }
}

TEST_P(Registry, MetaInferenceMatchesEager) {
  if (!GetParam().sample.runs_on_meta) GTEST_SKIP() << "the public API needs memory";
  expect_meta_matches_eager(GetParam().sample, GetParam().sample.inputs);
}

TEST_P(Registry, GradcheckFloat64) {
  const OpSample& s = GetParam().sample;
  if (!s.check_grad) GTEST_SKIP() << "not differentiable at these inputs";
  GradcheckOptions options;
  options.inputs = s.grad_inputs;
  EXPECT_TRUE(gradcheck(s.fn, s.inputs, options));
}

// Note [channels-last]: a layout changes which kernels run, never the values. Every sample runs
// again with its rank-4 inputs laid out channels-last; outputs and first-order gradients (seeded
// by the same random grad_outputs) must agree with the plain run.
std::vector<Tensor> outputs_and_grads(const OpSample& s, std::vector<Tensor> in) {
  std::vector<Tensor> leaves;
  for (Tensor& t : in) {
    t = t.detach();
    if (s.check_grad && is_floating(t.dtype())) {
      t.set_requires_grad(true);
      leaves.push_back(t);
    }
  }
  const std::vector<Tensor> outs = s.fn(in);
  std::vector<Tensor> result, differentiable, seeds;
  manual_seed(11);
  for (const Tensor& o : outs) {
    result.push_back(o.detach());
    if (!o.requires_grad()) continue;
    differentiable.push_back(o);
    seeds.push_back(randn(o.shape(), {o.dtype()}));
  }
  if (differentiable.empty()) return result;
  for (const Tensor& g : grad(differentiable, leaves, seeds, false, false, /*allow_unused=*/true))
    result.push_back(g);
  return result;
}

// True for a rank-4 tensor whose channels-last layout differs from the contiguous one.
bool has_distinct_channels_last(const Tensor& t) {
  return t.dim() == 4 && is_channels_last(t.shape(), channels_last_strides(t.shape()));
}

std::vector<Case> channels_last_cases() {
  std::vector<Case> cases;
  for (Case& c : all_cases())
    if (std::any_of(c.sample.inputs.begin(), c.sample.inputs.end(), has_distinct_channels_last))
      cases.push_back(std::move(c));
  return cases;
}

class RegistryChannelsLast : public ::testing::TestWithParam<Case> {};

TEST_P(RegistryChannelsLast, InputsGiveTheSameResults) {
  const OpSample& s = GetParam().sample;
  std::vector<Tensor> last;
  for (const Tensor& t : s.inputs)
    last.push_back(has_distinct_channels_last(t) ? contiguous(t, MemoryFormat::kChannelsLast) : t);
  if (s.runs_on_meta) expect_meta_matches_eager(s, last);
  const std::vector<Tensor> want = outputs_and_grads(s, s.inputs);
  const std::vector<Tensor> got = outputs_and_grads(s, last);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("result " + std::to_string(i));
    ASSERT_EQ(got[i].defined(), want[i].defined());
    if (want[i].defined()) test::expect_allclose(got[i], want[i], 1e-12);
  }
}

const auto case_name = registry_case_name;

INSTANTIATE_TEST_SUITE_P(Ops, Registry, ::testing::ValuesIn(all_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Ops, RegistryChannelsLast, ::testing::ValuesIn(channels_last_cases()),
                         case_name);

// Every op that runs while the samples run forward and backward must have samples of its own
// (this catches ops used only inside gradients, such as slice_backward).
TEST(RegistryCoverage, EveryDispatchedOpIsRegistered) {
  std::set<std::string> seen, registered;
  for (const OpInfo& info : registered_ops()) registered.insert(info.name);
  test::RecordOps record;
  for (const Case& c : all_cases()) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : c.sample.inputs) {
      leaves.push_back(t.detach());
      if (is_floating(t.dtype())) leaves.back().set_requires_grad(true);
    }
    SCOPED_TRACE(c.op + "/" + c.sample.label);
    std::vector<Tensor> outs = c.sample.fn(leaves);
    for (const Tensor& o : outs)
      if (o.requires_grad()) o.sum().backward(Tensor(), true);
  }
  for (const auto& call : record.calls()) seen.insert(call.op->name());
  std::string missing;
  for (const std::string& name : seen)
    if (!registered.count(name)) missing += " " + name;
  EXPECT_TRUE(missing.empty()) << "ops without registered samples:" << missing;
}

}  // namespace
}  // namespace kiln
