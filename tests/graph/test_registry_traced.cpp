// Every registered op sample, traced (Note [tracer]) and run by the executor (Note [graph
// executor]), equals eager bit for bit, and so does the graph after a JSON round trip (Note
// [graph JSON]). An op added later is covered by its samples; nothing here changes.
#include <gtest/gtest.h>

#include "kiln/graph/executor.h"
#include "kiln/graph/serialize.h"
#include "kiln/graph/tracer.h"
#include "kiln/kiln.h"
#include "tests/support/registry_cases.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Case = test::RegistryCase;

class RegistryTraced : public ::testing::TestWithParam<Case> {};

// Fresh copies with the same geometry: samples with in-place ops write their inputs.
std::vector<Tensor> copies(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  NoGradGuard no_grad;
  for (const Tensor& t : ts) {
    const int64_t elements = static_cast<int64_t>(t.storage()->nbytes() / itemsize(t.dtype()));
    Tensor c =
        make_view(empty({elements}, {t.dtype()}), t.shape(), t.strides(), t.storage_offset());
    c.copy_(t);
    out.push_back(t.requires_grad() ? c.detach().set_requires_grad(true) : c);
  }
  return out;
}

Graph trace(const OpSample& s) {
  Tracer tracer(s.label);
  std::vector<Tensor> ins;
  for (size_t i = 0; i < s.inputs.size(); ++i)
    ins.push_back(tracer.add_input(s.inputs[i], "a" + std::to_string(i)));
  tracer.start();
  std::vector<Tensor> outs = s.fn(ins);
  return tracer.finish(outs);
}

void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(what + " " + std::to_string(i));
    EXPECT_FALSE(got[i].is_meta());
    test::expect_bit_identical(got[i], want[i]);
  }
}

TEST_P(RegistryTraced, TracedAndRoundTrippedGraphsEqualEager) {
  const OpSample& s = GetParam().sample;
  if (!s.runs_on_meta) GTEST_SKIP() << "the public API needs memory";
  // A random node draws fresh blocks of the default generator on every run (Note [random
  // effects]), the ones eager draws at that point of the stream: each run starts from the seed
  // eager started from.
  manual_seed(1234);
  std::vector<Tensor> eager_in = copies(s.inputs);
  const std::vector<Tensor> eager = s.fn(eager_in);
  manual_seed(1234);
  const Graph g = trace(s);
  SCOPED_TRACE(to_text(g));
  ASSERT_FALSE(g.nodes.empty() && eager.size() && g.captures.empty() && g.inputs.empty());

  std::vector<Tensor> run_in = copies(s.inputs);
  manual_seed(1234);
  expect_same(run(g, run_in), eager, "traced output");
  expect_same(run_in, eager_in, "input after the traced run (in-place effects)");

  const nlohmann::json doc = to_json(g);
  std::vector<Tensor> captured;
  for (const Capture& c : g.captures) captured.push_back(c.tensor);
  const Graph loaded = from_json(nlohmann::json::parse(doc.dump()), captured);
  EXPECT_EQ(to_json(loaded), doc) << "the JSON round trip is exact";
  EXPECT_EQ(to_text(loaded), to_text(g));
  std::vector<Tensor> loaded_in = copies(s.inputs);
  manual_seed(1234);
  expect_same(run(loaded, loaded_in), eager, "loaded graph output");
  expect_same(loaded_in, eager_in, "input after the loaded graph's run");
}

INSTANTIATE_TEST_SUITE_P(Ops, RegistryTraced, ::testing::ValuesIn(test::registry_cases()),
                         test::registry_case_name);

}  // namespace
}  // namespace kiln::graph
