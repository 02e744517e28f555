// Note [rematerialization], walked over the registry: an op that declares memory_bound() may be
// computed a second time by the remat pass, so it must be pure (it writes no input, draws no
// random numbers, is no view) and its kernel, run again on the same inputs, must give the same
// bits as the first call. Every such op met in the samples is checked; the declaring ops must
// include the ones a training graph recomputes.
#include <gtest/gtest.h>

#include <set>

#include "kiln/kiln.h"
#include "tests/samples/registry.h"
#include "tests/support/op_recorder.h"
#include "tests/support/registry_cases.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

TEST(RegistryMemoryBound, EveryMemoryBoundOpIsPureAndRecomputesItsBits) {
  std::set<std::string> checked;
  for (const test::RegistryCase& c : test::registry_cases()) {
    std::vector<test::RecordedCall> calls;
    if (!test::record_calls([&] { c.sample.fn(c.sample.inputs); }, calls))
      continue;  // a sample of an error path
    for (const test::RecordedCall& call : calls) {
      if (!call.op->memory_bound()) continue;
      SCOPED_TRACE(c.op + "/" + c.sample.label + ": " + call.op->name());
      EXPECT_EQ(call.op->mutates(), 0u);
      EXPECT_FALSE(call.op->draws_random());
      EXPECT_FALSE(call.op->is_view());
      NoGradGuard no_grad;
      const std::vector<Tensor> again =
          call.op->forward(call.inputs, call.op->infer(call.inputs, call.loc));
      ASSERT_EQ(again.size(), call.outputs.size());
      for (size_t k = 0; k < again.size(); ++k)
        if (call.outputs[k].defined()) test::expect_bit_identical(again[k], call.outputs[k]);
      checked.insert(call.op->name());
    }
  }
  for (const char* name : {"batch_norm", "relu", "add", "mul", "channel_affine", "to_dtype"})
    EXPECT_TRUE(checked.count(name)) << name << " is memory-bound but no sample called it";
}

}  // namespace
}  // namespace kiln
