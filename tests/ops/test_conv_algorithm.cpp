// Note [conv algorithm]: a forward convolution's algorithm and purpose are attributes of its op,
// resolved by the public function at call time, so a recorded op replays bit for bit in any grad
// mode; bad attribute values are errors naming the op and the attribute. Which kernel each
// algorithm runs, and its error bound, are tested with the oneDNN backend
// (tests/backend/onednn/test_conv_winograd.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/conv_attrs.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/op_recorder.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using detail::ConvPurpose;
using test::expect_error;

// A float32 convolution workload: conv2d with a bias, then conv2d_affine with a residual and a
// relu (fused when no gradient is recorded).
struct Workload {
  Shape x, w;
  Conv2dOptions options;
};

std::vector<Tensor> leaves(const std::vector<Tensor>& ts, bool requires_grad) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) {
    out.push_back(t.detach());
    if (requires_grad) out.back().set_requires_grad(true);
  }
  return out;
}

std::vector<test::RecordedCall> run(const Workload& c, const std::vector<Tensor>& in) {
  test::RecordOps record(/*copy_values=*/true);
  Tensor y = conv2d(in[0], in[1], in[2], c.options);
  conv2d_affine(in[0], in[1], in[3], in[4], y, /*relu=*/true, c.options);
  return record.calls();
}

// Rebuilds each recorded op from its (name, attrs) text and dispatches it on copies of its
// inputs with grad mode `grad_on` (and inputs that require grad when it is on).
void expect_replays_identically(const std::vector<test::RecordedCall>& calls, bool grad_on) {
  for (const test::RecordedCall& call : calls) {
    const std::string attrs = call.op->attrs().dump();
    SCOPED_TRACE(std::string(call.op->name()) + " " + attrs);
    OpPtr op = make_op(call.op->name(), nlohmann::json::parse(attrs));
    std::vector<Tensor> inputs;
    for (const Tensor& t : call.inputs) inputs.push_back(t.clone());
    test::GradModeScope mode(grad_on);
    if (grad_on)
      for (Tensor& t : inputs)
        if (is_floating(t.dtype())) t.set_requires_grad(true);
    const std::vector<Tensor> outputs = dispatch(op, inputs, Loc::current());
    ASSERT_EQ(outputs.size(), call.outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i)
      test::expect_bit_identical(outputs[i].detach(), call.outputs[i]);
  }
}

std::vector<std::string> forward_purposes(const std::vector<test::RecordedCall>& calls) {
  std::vector<std::string> purposes;
  for (const test::RecordedCall& call : calls) {
    const nlohmann::json a = call.op->attrs();
    if (a.contains("purpose")) purposes.push_back(a["purpose"].get<std::string>());
  }
  return purposes;
}

std::vector<Workload> workloads() {
  return {
      // Batched 3x3: kAuto runs Winograd for inference, the weights come from the weight cache
      // and the outputs stay blocked (Note [blocked activations]).
      {{4, 16, 8, 8}, {16, 16, 3, 3}, {.padding = 1}},
      // A single image: inference asks oneDNN for forward_inference kernels, which write NHWC.
      {{1, 16, 8, 8}, {16, 16, 3, 3}, {.padding = 1}},
      {{4, 16, 8, 8}, {16, 16, 3, 3}, {.padding = 1, .algorithm = ConvAlgorithm::kWinograd}},
      {{3, 8, 9, 9},
       {16, 8, 3, 3},
       {.stride = 2, .padding = 1, .algorithm = ConvAlgorithm::kDirect}},
  };
}

std::vector<Tensor> inputs_for(const Workload& c) {
  const int64_t o = c.w[0];
  return {randn(c.x), mul(randn(c.w), 0.2), randn({o}), add(rand({o}), 0.5), randn({o})};
}

TEST(ConvAlgorithm, InferenceOpsReplayBitIdenticallyWithGradModeOn) {
  for (const Workload& c : workloads()) {
    SCOPED_TRACE(shape_str(c.x) + " " + detail::conv_algorithm_name(c.options.algorithm));
    manual_seed(51);
    const std::vector<Tensor> in = inputs_for(c);
    std::vector<test::RecordedCall> calls;
    {
      NoGradGuard no_grad;
      calls = run(c, in);
    }
    ASSERT_EQ(forward_purposes(calls), (std::vector<std::string>{"inference", "inference"}));
    expect_replays_identically(calls, /*grad_on=*/true);
  }
}

TEST(ConvAlgorithm, TrainingOpsReplayBitIdenticallyWithoutGrad) {
  for (const Workload& c : workloads()) {
    SCOPED_TRACE(shape_str(c.x) + " " + detail::conv_algorithm_name(c.options.algorithm));
    manual_seed(52);
    const std::vector<test::RecordedCall> calls = run(c, leaves(inputs_for(c), true));
    // conv2d_affine recorded its composition: conv2d, channel_affine, add, relu.
    ASSERT_EQ(forward_purposes(calls), (std::vector<std::string>{"training", "training"}));
    expect_replays_identically(calls, /*grad_on=*/false);
  }
}

// "A gradient recorded for this call" is grad mode and an input that requires grad: grad mode
// alone, with plain tensors, records nothing, so the call is inference.
TEST(ConvAlgorithm, PurposeFollowsWhetherAGradientIsRecorded) {
  manual_seed(53);
  const Workload c{{2, 16, 6, 6}, {16, 16, 3, 3}, {.padding = 1}};
  const std::vector<Tensor> in = inputs_for(c);
  test::GradModeScope on(true);
  EXPECT_EQ(forward_purposes(run(c, in)), (std::vector<std::string>{"inference", "inference"}));
  std::vector<Tensor> weight_only = in;
  weight_only[1] = leaves({in[1]}, true)[0];
  EXPECT_EQ(forward_purposes(run(c, weight_only)),
            (std::vector<std::string>{"training", "training"}));
}

TEST(ConvAlgorithm, AttrsRoundTripAndBadValuesAreErrors) {
  for (ConvAlgorithm a : {ConvAlgorithm::kAuto, ConvAlgorithm::kDirect, ConvAlgorithm::kWinograd})
    for (ConvPurpose p : {ConvPurpose::kTraining, ConvPurpose::kInference}) {
      const nlohmann::json attrs = detail::conv_forward_attrs({.padding = 1, .algorithm = a}, p);
      for (const char* name : {"conv2d", "conv2d_affine"}) {
        nlohmann::json with = attrs;
        if (std::string(name) == "conv2d_affine") with["relu"] = true;
        EXPECT_EQ(make_op(name, with)->attrs(), with) << name;
      }
    }
  nlohmann::json good = detail::conv_forward_attrs({}, ConvPurpose::kInference);
  nlohmann::json bad = good;
  bad["algorithm"] = "fastest";
  expect_error([&] { make_op("conv2d", bad); },
               {"op 'conv2d'", "attribute 'algorithm'", "\"auto\", \"direct\" or \"winograd\"",
                "\"fastest\""});
  bad = good;
  bad["purpose"] = "auto";  // ops hold the resolved decision, never "auto"
  expect_error([&] { make_op("conv2d", bad); },
               {"op 'conv2d'", "attribute 'purpose'", "\"training\" or \"inference\"", "\"auto\""});
  bad = good;
  bad.erase("purpose");
  bad["relu"] = false;
  expect_error([&] { make_op("conv2d_affine", bad); },
               {"op 'conv2d_affine'", "attribute 'purpose' is missing"});
  bad = detail::conv_attrs({});
  bad["algorithm"] = 3;
  bad["input_size"] = {4, 4};
  expect_error([&] { make_op("conv2d_backward_input", bad); },
               {"op 'conv2d_backward_input'", "attribute 'algorithm'"});
}

}  // namespace
}  // namespace kiln
