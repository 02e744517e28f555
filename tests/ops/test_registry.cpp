// The table-driven test of every registered op sample: meta inference matches eager, and
// (where differentiable) autograd matches finite differences. Ops added later are covered by
// registering samples beside their definition; nothing here changes.
#include <gtest/gtest.h>

#include <set>

#include "kiln/autograd/gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/registry.h"

namespace kiln {
namespace {

struct Case {
  std::string op;
  OpSample sample;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const OpInfo& info : registered_ops())
    for (OpSample& s : info.samples()) cases.push_back({info.name, std::move(s)});
  return cases;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.op << "/" << c.sample.label;
}

class Registry : public ::testing::TestWithParam<Case> {};

TEST_P(Registry, MetaInferenceMatchesEager) {
  const OpSample& s = GetParam().sample;
  std::vector<Tensor> eager = s.fn(s.inputs);
  std::vector<Tensor> meta_inputs;
  for (const Tensor& t : s.inputs) meta_inputs.push_back(t.to(kMeta));
  std::vector<Tensor> meta = s.fn(meta_inputs);
  ASSERT_EQ(meta.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(meta[i].is_meta());
    EXPECT_EQ(meta[i].shape(), eager[i].shape()) << "output " << i;
    EXPECT_EQ(meta[i].dtype(), eager[i].dtype()) << "output " << i;
  }
}

TEST_P(Registry, GradcheckFloat64) {
  const OpSample& s = GetParam().sample;
  if (!s.check_grad) GTEST_SKIP() << "not differentiable at these inputs";
  GradcheckOptions options;
  options.inputs = s.grad_inputs;
  EXPECT_TRUE(gradcheck(s.fn, s.inputs, options));
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.op + "_" + info.param.sample.label;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Ops, Registry, ::testing::ValuesIn(all_cases()), case_name);

// Every op that runs while the samples run forward and backward must have samples of its own
// (this catches ops used only inside gradients, such as slice_backward).
TEST(RegistryCoverage, EveryDispatchedOpIsRegistered) {
  std::set<std::string> seen, registered;
  for (const OpInfo& info : registered_ops()) registered.insert(info.name);
  set_dispatch_observer([&](const Op& op) { seen.insert(op.name()); });
  struct Reset {
    ~Reset() { set_dispatch_observer(nullptr); }
  } reset;
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
  std::string missing;
  for (const std::string& name : seen)
    if (!registered.count(name)) missing += " " + name;
  EXPECT_TRUE(missing.empty()) << "ops without registered samples:" << missing;
}

}  // namespace
}  // namespace kiln
