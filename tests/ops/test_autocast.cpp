// Autocast (Note [autocast]): every op declares its policy, each sample runs in the dtypes its
// policy says, gradients reach float32 parameters, parameter casts are cached, and a CPU without
// native 16-bit kernels keeps float32 with one warning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/warning.h"
#include "kiln/kiln.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/op_factory.h"
#include "tests/samples/registry.h"
#include "tests/support/op_recorder.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

// Sets KILN_NATIVE_LOW_PRECISION for a scope (Note [autocast]: the override tests use).
class NativeOverride {
 public:
  explicit NativeOverride(const char* value) {
    if (const char* old = std::getenv("KILN_NATIVE_LOW_PRECISION")) saved_ = old;
    setenv("KILN_NATIVE_LOW_PRECISION", value, 1);
  }
  ~NativeOverride() {
    if (saved_.empty())
      unsetenv("KILN_NATIVE_LOW_PRECISION");
    else
      setenv("KILN_NATIVE_LOW_PRECISION", saved_.c_str(), 1);
  }

 private:
  std::string saved_;
};

AutocastOptions forced() {
  AutocastOptions o;
  o.force = true;
  return o;
}

Tensor to_f32_inputs(const Tensor& t) {
  return t.defined() && t.dtype() == DType::Float64 ? t.to(DType::Float32) : t;
}

// max |got - want| / max |want|
double scaled_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / scale;
}

TEST(AutocastPolicy, EveryRegisteredOpDeclaresOne) {
  std::vector<std::string> undeclared;
  for (const std::string& name : registered_op_names())
    if (find_op_definition(name)->schema.autocast == AutocastPolicy::kUndeclared)
      undeclared.push_back(name);
  EXPECT_TRUE(undeclared.empty()) << "ops without an autocast policy in their registration "
                                     "(OpSchema::autocast, Note [autocast policy]): "
                                  << ::testing::PrintToString(undeclared);
}

TEST(AutocastPolicy, TheComputeBoundOpsRunLowAndTheSensitiveOnesInFloat32) {
  auto policy = [](const char* name) { return find_op_definition(name)->schema.autocast; };
  for (const char* name : {"matmul", "bmm", "linear", "conv2d", "conv_transpose2d"})
    EXPECT_EQ(policy(name), AutocastPolicy::kLowPrecision) << name;
  for (const char* name : {"softmax", "log_softmax", "cross_entropy", "sum", "exp", "log",
                           "batch_norm", "layer_norm", "group_norm"})
    EXPECT_EQ(policy(name), AutocastPolicy::kFloat32) << name;
  for (const char* name : {"add", "mul", "cat", "where"})
    EXPECT_EQ(policy(name), AutocastPolicy::kPromote) << name;
  for (const char* name : {"relu", "reshape", "max_pool2d", "to_dtype", "adam_update"})
    EXPECT_EQ(policy(name), AutocastPolicy::kKeep) << name;
}

// Every sample of every op, on float32 inputs inside a forced bfloat16 region: each op call (the
// sample's own and the ones it makes) runs with the input dtypes its policy gives.
TEST(Autocast, EverySampleRunsInTheDtypesItsPolicySays) {
  std::set<std::string> checked_low, failures;
  for (const OpInfo& info : registered_ops()) {
    for (const OpSample& sample : info.samples()) {
      std::vector<Tensor> inputs;
      for (const Tensor& t : sample.inputs) inputs.push_back(to_f32_inputs(t));
      test::OpRecorder recorder(/*copy_values=*/false, /*skip_traces=*/true);
      try {
        AutocastGuard region(DType::BFloat16, forced());
        DispatchModeGuard record(std::shared_ptr<DispatchMode>(&recorder, [](DispatchMode*) {}));
        sample.fn(inputs);
      } catch (const Error&) {
        continue;  // a sample of an error path (or an op refusing float32 in this role)
      }
      for (const test::RecordedCall& call : recorder.calls) {
        const AutocastPolicy policy = autocast_policy(*call.op);
        std::set<DType> floating;
        for (const Tensor& t : call.inputs)  // C++ numbers (x * 0.5) are not operands to widen
          if (t.defined() && is_floating(t.dtype()) && !t.impl()->is_wrapped_number_)
            floating.insert(t.dtype());
        const std::string where = sample.label + ": " + call.op->name();
        if (policy == AutocastPolicy::kLowPrecision) {
          // OpSchema::float32_inputs go to float32 instead; the others to bfloat16.
          const OpSchema& schema = find_op_definition(call.op->name())->schema;
          for (size_t i = 0; i < call.inputs.size(); ++i) {
            const Tensor& t = call.inputs[i];
            if (!t.defined() || !is_floating(t.dtype()) || t.impl()->is_wrapped_number_ ||
                t.dtype() == DType::Float64)
              continue;
            std::string declared = i < schema.inputs.size() ? schema.inputs[i] : "";
            if (declared.ends_with('?')) declared.pop_back();
            const bool f32 = std::find(schema.float32_inputs.begin(), schema.float32_inputs.end(),
                                       declared) != schema.float32_inputs.end();
            const DType want = f32 ? DType::Float32 : DType::BFloat16;
            if (t.dtype() != want)
              failures.insert(where + " ran " + dtype_name(t.dtype()) + " input '" + declared +
                              "'");
          }
          checked_low.insert(call.op->name());
        } else if (policy == AutocastPolicy::kFloat32) {
          if (floating.count(DType::BFloat16) || floating.count(DType::Float16))
            failures.insert(where + " ran a 16-bit input");
        } else if (policy == AutocastPolicy::kPromote) {
          if (floating.size() > 1) failures.insert(where + " ran mixed floating inputs");
        }
      }
    }
  }
  EXPECT_TRUE(failures.empty()) << ::testing::PrintToString(failures);
  for (const char* name : {"bmm", "conv2d", "linear", "matmul"})
    EXPECT_TRUE(checked_low.count(name)) << name << " was never seen running in bfloat16";
  // The fused epilogue is emitted where oneDNN has native bfloat16 kernels (Note [low-precision
  // conv epilogue]); elsewhere conv2d_affine records its composition.
  if (has_native_low_precision(DType::BFloat16)) {
    EXPECT_TRUE(checked_low.count("conv2d_affine")) << "conv2d_affine never ran in bfloat16";
  }
}

TEST(Autocast, LinearRunsInBfloat16AndItsGradientsReachFloat32Parameters) {
  manual_seed(3);
  Tensor x = randn({8, 16});
  Tensor w = randn({4, 16}).set_requires_grad(true);
  Tensor b = randn({4}).set_requires_grad(true);
  Tensor y, loss;
  {
    auto region = autocast(DType::BFloat16, forced());
    y = linear(x, w, b);
    loss = sum(mul(y, y));
  }
  EXPECT_EQ(y.dtype(), DType::BFloat16);
  EXPECT_EQ(loss.dtype(), DType::Float32) << "sum runs in float32";
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_EQ(b.grad().dtype(), DType::Float32);
  // Against float32 arithmetic: bfloat16 keeps 8 significant bits.
  Tensor w32 = w.detach(), b32 = b.detach();
  w32.set_requires_grad(true);
  b32.set_requires_grad(true);
  Tensor y32 = linear(x, w32, b32);
  sum(mul(y32, y32)).backward();
  // Against float32 arithmetic, relative to the largest element (sums of products cancel, so a
  // single element's relative error says little): bfloat16 keeps 8 significant bits.
  EXPECT_LT(scaled_error(y.to(DType::Float32), y32), 2e-2);
  EXPECT_LT(scaled_error(w.grad(), w32.grad()), 2e-2);
  EXPECT_LT(scaled_error(b.grad(), b32.grad()), 2e-2);
}

TEST(Autocast, AParameterIsCastOncePerRegionUntilItChanges) {
  manual_seed(4);
  Tensor w = randn({6, 6}).set_requires_grad(true);
  Tensor x = randn({2, 6});
  test::OpRecorder recorder;
  {
    auto region = autocast(DType::BFloat16, forced());
    DispatchModeGuard record(std::shared_ptr<DispatchMode>(&recorder, [](DispatchMode*) {}));
    Tensor h = x;
    for (int i = 0; i < 3; ++i) h = matmul(h, w);
    size_t weight_casts = 0;
    for (const auto& call : recorder.calls)
      if (std::string(call.op->name()) == "to_dtype" && call.inputs[0].impl() == w.impl())
        ++weight_casts;
    EXPECT_EQ(weight_casts, 1u);
    {
      NoGradGuard no_grad;
      w.mul_(2.0);  // a new version: the cached cast is stale
    }
    matmul(x, w);
    weight_casts = 0;
    for (const auto& call : recorder.calls)
      if (std::string(call.op->name()) == "to_dtype" && call.inputs[0].impl() == w.impl())
        ++weight_casts;
    EXPECT_EQ(weight_casts, 2u);
  }
}

TEST(Autocast, BackwardInsideARegionAndASecondStepBothWork) {
  manual_seed(5);
  Tensor w = randn({4, 4}).set_requires_grad(true);
  Tensor x = randn({3, 4});
  auto region = autocast(DType::BFloat16, forced());
  for (int step = 0; step < 2; ++step) {
    Tensor loss = sum(matmul(x, w));
    loss.backward();  // frees the graph of the cached cast; the next step casts anew
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().dtype(), DType::Float32);
  }
}

TEST(Autocast, WithoutNativeKernelsARegionWarnsOnceAndKeepsFloat32) {
  NativeOverride no_native("0");
  reset_warnings();
  std::vector<std::string> warnings;
  WarningHandler previous =
      set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  Tensor a = randn({3, 3}), b = randn({3, 3});
  for (int i = 0; i < 2; ++i) {
    auto region = autocast(DType::BFloat16);
    EXPECT_FALSE(region.active());
    EXPECT_FALSE(autocast_dtype().has_value());
    EXPECT_EQ(matmul(a, b).dtype(), DType::Float32);
  }
  {
    auto region = autocast(DType::BFloat16, forced());
    EXPECT_TRUE(region.active());
    EXPECT_EQ(matmul(a, b).dtype(), DType::BFloat16);
  }
  set_warning_handler(previous);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("no native bfloat16"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("force"), std::string::npos) << warnings[0];
}

TEST(Autocast, ANestedDisabledRegionAndFloat64AreLeftAlone) {
  Tensor a = randn({2, 2}), b = randn({2, 2});
  auto region = autocast(DType::BFloat16, forced());
  EXPECT_EQ(autocast_dtype(), DType::BFloat16);
  {
    AutocastOptions off;
    off.enabled = false;
    auto inner = autocast(DType::BFloat16, off);
    EXPECT_EQ(matmul(a, b).dtype(), DType::Float32);
  }
  EXPECT_EQ(matmul(a, b).dtype(), DType::BFloat16);
  EXPECT_EQ(matmul(a.to(DType::Float64), b.to(DType::Float64)).dtype(), DType::Float64);
  // A float32 op after a low one: add promotes to the wider operand.
  EXPECT_EQ(add(matmul(a, b), a).dtype(), DType::Float32);
}

TEST(Autocast, RejectsADtypeThatIsNotALowPrecision) {
  EXPECT_THROW({ auto region = autocast(DType::Float32); }, Error);
  EXPECT_THROW({ auto region = autocast(DType::Int8); }, Error);
}

TEST(Autocast, Float16HasNoNativeKernelsInThisOneDnn) {
  EXPECT_FALSE(has_native_low_precision(DType::Float16));
  NativeOverride native("1");
  EXPECT_TRUE(has_native_low_precision(DType::Float16));
}

// The native bfloat16 matmul (AVX512-BF16/AMX where the CPU has it) accumulates in float32: its
// result is the float32 product of the bfloat16 operands, rounded once, up to summation order.
TEST(Autocast, Bfloat16BmmMatchesTheFloat32ProductOfItsOperands) {
  manual_seed(6);
  for (bool transposed : {false, true}) {
    Tensor a = randn({3, 37, 64}).to(DType::BFloat16);
    Tensor b = randn({3, 64, 29}).to(DType::BFloat16);
    if (transposed) b = randn({3, 29, 64}).to(DType::BFloat16).transpose(1, 2);
    Tensor got = bmm(a, b);
    ASSERT_EQ(got.dtype(), DType::BFloat16);
    Tensor want = bmm(a.to(DType::Float32), b.to(DType::Float32));
    // One bfloat16 rounding of the result: relative 2^-8.
    test::expect_allclose(got.to(DType::Float32), want, 1.0 / 128);
  }
}

// A bfloat16 convolution (oneDNN's bfloat16 kernels where the CPU has them, Note [low-precision
// convolutions]) and both its gradients: the float32 results of the same bfloat16 operands,
// rounded once, up to summation order.
TEST(Autocast, Bfloat16ConvolutionAndItsGradientsMatchFloat32OnTheSameOperands) {
  manual_seed(7);
  for (bool channels_last : {false, true}) {
    Tensor x = randn({4, 16, 10, 10}).to(DType::BFloat16);
    if (channels_last) x = contiguous(x, MemoryFormat::kChannelsLast);
    Tensor w = mul(randn({32, 16, 3, 3}), 0.1).to(DType::BFloat16);
    Tensor b = randn({32});
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    Tensor y = conv2d(x, w, b.to(DType::BFloat16), {.padding = {1, 1}});
    ASSERT_EQ(y.dtype(), DType::BFloat16);
    Tensor gy = randn(y.shape()).to(DType::BFloat16);
    sum(mul(y, gy)).backward();
    ASSERT_EQ(x.grad().dtype(), DType::BFloat16);
    ASSERT_EQ(w.grad().dtype(), DType::BFloat16);

    Tensor x32 = x.detach().to(DType::Float32), w32 = w.detach().to(DType::Float32);
    x32.set_requires_grad(true);
    w32.set_requires_grad(true);
    Tensor y32 = conv2d(x32, w32, b.to(DType::BFloat16).to(DType::Float32), {.padding = {1, 1}});
    sum(mul(y32, gy.to(DType::Float32))).backward();
    test::expect_allclose(y.to(DType::Float32), y32, 1.0 / 64);
    test::expect_allclose(x.grad().to(DType::Float32), x32.grad(), 1.0 / 64);
    test::expect_allclose(w.grad().to(DType::Float32), w32.grad(), 1.0 / 64);
  }
}

TEST(Autocast, ConvolutionUnderAutocastKeepsFloat32ParametersAndGradients) {
  manual_seed(8);
  Tensor x = randn({2, 3, 8, 8});
  Tensor w = randn({4, 3, 3, 3}).set_requires_grad(true);
  Tensor b = randn({4}).set_requires_grad(true);
  Tensor y;
  {
    auto region = autocast(DType::BFloat16, forced());
    y = conv2d(x, w, b);
    EXPECT_EQ(y.dtype(), DType::BFloat16);
    EXPECT_EQ(log_softmax(y.reshape({2, -1}), 1).dtype(), DType::Float32);
  }
  sum(y).backward();
  EXPECT_EQ(w.dtype(), DType::Float32);
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_EQ(b.grad().dtype(), DType::Float32);
}

}  // namespace
}  // namespace kiln
