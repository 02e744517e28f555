// Note [in-place computation], walked over the registry: every op call the samples make whose op
// declares may_overwrite() runs its kernel again with output 0 placed on each input it may
// overwrite (where that input fits: the output's shape, dtype and dense layout), and must give
// bit for bit what the out-of-place call gave. An op that declares it and is never checked fails
// the coverage test, so a new declaration cannot go untested.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "kiln/kiln.h"
#include "tests/samples/registry.h"
#include "tests/support/op_recorder.h"
#include "tests/support/registry_cases.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

// Whether output 0 of `op` may be placed on input j: the shape, dtype and layout of the output.
bool fits(const Tensor& in, const TensorMeta& out) {
  if (!in.defined() || in.is_meta() || in.shape() != out.shape || in.dtype() != out.dtype)
    return false;
  if (!out.strides.empty() || out.alias_of >= 0 || in.numel() == 0) return false;
  return out.memory_format == MemoryFormat::kContiguous ? in.is_contiguous()
                                                        : in.is_channels_last();
}

TEST(RegistryInPlace, EveryOverwritingKernelGivesTheOutOfPlaceResult) {
  std::map<std::string, int> checked;  // op -> calls checked in place
  std::set<std::string> declaring;
  for (const test::RegistryCase& c : test::registry_cases()) {
    std::vector<test::RecordedCall> calls;
    if (!test::record_calls([&] { c.sample.fn(c.sample.inputs); }, calls))
      continue;  // a sample of an error path
    for (const test::RecordedCall& call : calls) {
      const uint64_t mask = call.op->may_overwrite();
      if (mask == 0 || call.outputs.size() != 1 || !call.outputs[0].defined()) continue;
      declaring.insert(call.op->name());
      NoGradGuard no_grad;
      const std::vector<TensorMeta> metas = call.op->infer(call.inputs, call.loc);
      for (size_t j = 0; j < call.inputs.size() && j < 64; ++j) {
        if (!(mask >> j & 1) || !fits(call.inputs[j], metas[0])) continue;
        SCOPED_TRACE(c.op + "/" + c.sample.label + ": " + call.op->name() + " into input " +
                     std::to_string(j));
        std::vector<Tensor> args = call.inputs;
        args[j] = call.inputs[j].clone();
        ASSERT_EQ(args[j].strides(), call.inputs[j].strides());
        std::vector<Tensor> outs = {args[j]};
        call.op->kernel(args, outs);
        test::expect_bit_identical(outs[0], call.outputs[0]);
        ++checked[call.op->name()];
      }
    }
  }
  for (const std::string& name : declaring)
    EXPECT_GT(checked[name], 0) << name
                                << " declares may_overwrite() but no sample call had an input "
                                   "its output could be computed into: add one";
  EXPECT_FALSE(declaring.empty());
}

}  // namespace
}  // namespace kiln
