// Note [op factory]: every op is rebuilt from (name, attrs) and computes the same thing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <typeinfo>

#include "kiln/kiln.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "tests/support/op_recorder.h"
#include "tests/support/registry_cases.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::RegistryCase;

// Runs a sample without gradients, then forward and backward (inputs as leaves that require
// grad, like the coverage test), and returns every op call it made, with copies of the values.
std::vector<test::RecordedCall> record_sample(const OpSample& s) {
  test::RecordOps record(/*copy_values=*/true, /*skip_traces=*/true);
  {
    NoGradGuard no_grad;
    s.fn(s.inputs);
  }
  std::vector<Tensor> leaves;
  for (const Tensor& t : s.inputs) {
    leaves.push_back(t.detach());
    if (is_floating(t.dtype())) leaves.back().set_requires_grad(true);
  }
  std::vector<Tensor> outs = s.fn(leaves);
  for (const Tensor& o : outs)
    if (o.requires_grad()) o.sum().backward(Tensor(), true);
  return record.calls();
}

// Bitwise equal values, shapes and dtypes (NaN equals NaN).
void expect_identical(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(double)), 0)
        << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

class RebuildOps : public ::testing::TestWithParam<RegistryCase> {};

TEST_P(RebuildOps, EveryOpRebuiltFromNameAndAttrsComputesTheSame) {
  const std::vector<test::RecordedCall> calls = record_sample(GetParam().sample);
  ASSERT_FALSE(calls.empty());
  for (const test::RecordedCall& call : calls) {
    const Op& op = *call.op;
    SCOPED_TRACE(std::string(op.name()) + " " + op.attrs().dump());
    const OpDefinition* def = find_op_definition(op.name());
    ASSERT_NE(def, nullptr) << "no factory registered for '" << op.name() << "'";
    EXPECT_TRUE(def->schema.accepts_inputs(call.inputs.size()))
        << call.inputs.size() << " inputs for " << def->schema.describe();
    EXPECT_TRUE(def->schema.accepts_outputs(call.outputs.size()))
        << call.outputs.size() << " outputs for " << def->schema.describe();
    // Through JSON text, as a saved graph stores it.
    OpPtr rebuilt = make_op(op.name(), nlohmann::json::parse(op.attrs().dump()));
    EXPECT_EQ(typeid(*rebuilt), typeid(op));
    EXPECT_TRUE(op_equivalent(*rebuilt, op));
    EXPECT_EQ(op_hash(*rebuilt), op_hash(op));
    std::vector<Tensor> outputs;
    {
      test::GradModeScope mode(call.grad_mode);  // as the call was recorded
      std::vector<Tensor> inputs;
      for (const Tensor& t : call.inputs) inputs.push_back(t.clone());
      outputs = dispatch(rebuilt, inputs, Loc::current());
    }
    ASSERT_EQ(outputs.size(), call.outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i)
      expect_identical(outputs[i], call.outputs[i], "output " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, RebuildOps, ::testing::ValuesIn(test::registry_cases()),
                         test::registry_case_name);

TEST(OpFactory, NamesAreUnique) {
  EXPECT_TRUE(duplicate_op_names().empty());
  EXPECT_GT(registered_op_names().size(), 80u);
}

TEST(OpFactory, EveryRegisteredOpRunsInSomeSample) {
  std::set<std::string> seen;
  for (const RegistryCase& c : test::registry_cases())
    for (const test::RecordedCall& call : record_sample(c.sample)) seen.insert(call.op->name());
  std::string never;
  for (const std::string& name : registered_op_names())
    if (!seen.count(name)) never += " " + name;
  EXPECT_TRUE(never.empty()) << "ops registered but never dispatched by a sample:" << never;
}

TEST(OpFactory, UnknownOpsAndBadAttrsAreErrors) {
  test::expect_error([] { make_op("no_such_op", nlohmann::json::object()); },
                     {"[make_op] unknown op 'no_such_op'", "known ops:", "conv2d"});
  test::expect_error([] { make_op("gather", nlohmann::json::object()); },
                     {"op 'gather'", "attribute 'dim' is missing"});
  test::expect_error(
      [] {
        make_op("gather", {{"dim", "zero"}});
      },
      {"attribute 'dim' must be an integer, but is a string"});
  test::expect_error([] { make_op("conv2d", {{"stride", {1}}}); }, {"'stride' must hold 2"});
  test::expect_error(
      [] {
        make_op("to_dtype", {{"dtype", "float128"}});
      },
      {"names no dtype: \"float128\""});
  test::expect_error([] { make_op("gather", nlohmann::json::array()); },
                     {"expected the attrs of 'gather' to be a JSON object"});
}

TEST(OpFactory, NonFiniteAttrsSurviveJsonText) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = tensor({-3.0, 0.5, 7.0}, {DType::Float64});
  test::RecordOps record;
  clamp(x, -inf, 1.0);
  masked_fill(x, gt(x, 0.0), std::nan(""));
  for (const auto& call : record.calls()) {
    const std::string text = call.op->attrs().dump();
    OpPtr rebuilt = make_op(call.op->name(), nlohmann::json::parse(text));
    EXPECT_EQ(rebuilt->attrs().dump(), text);
    EXPECT_TRUE(op_equivalent(*rebuilt, *call.op)) << text;
  }
  EXPECT_NE(record.calls()[0].op->attrs().dump().find("\"-inf\""), std::string::npos);
}

TEST(OpFactory, EquivalenceFollowsNameAndAttrs) {
  OpPtr a = make_op("sum", {{"dims", {0}}, {"keepdim", false}});
  OpPtr b = make_op("sum", {{"dims", {0}}, {"keepdim", false}});
  OpPtr c = make_op("sum", {{"dims", {1}}, {"keepdim", false}});
  OpPtr d = make_op("prod", {{"dims", {0}}, {"keepdim", false}});
  EXPECT_TRUE(op_equivalent(*a, *b));
  EXPECT_EQ(op_hash(*a), op_hash(*b));
  EXPECT_FALSE(op_equivalent(*a, *c));
  EXPECT_FALSE(op_equivalent(*a, *d));
  EXPECT_NE(op_hash(*a), op_hash(*c));
}

TEST(OpFactory, SchemaDescribesInputsAndOutputs) {
  const OpDefinition* conv = find_op_definition("conv2d");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->schema.describe(), "(input, weight, bias?) -> (output)");
  EXPECT_TRUE(conv->schema.accepts_inputs(2));
  EXPECT_TRUE(conv->schema.accepts_inputs(3));
  EXPECT_FALSE(conv->schema.accepts_inputs(1));
  EXPECT_FALSE(conv->schema.accepts_inputs(4));
  EXPECT_TRUE(find_op_definition("cat")->schema.accepts_inputs(5));
}

}  // namespace
}  // namespace kiln
