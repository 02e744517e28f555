// Note [conv-bn inference]: the fused evaluation path of conv -> batch norm (-> + residual)
// (-> relu) against the modules called one by one, and when it must not be taken.
#include "kiln/nn/conv_bn.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/core/grad_mode.h"
#include "kiln/kiln.h"
#include "kiln/ops/conv_bn_fold.h"
#include "tests/support/op_recorder.h"
#include "tests/support/test_util.h"

namespace kiln::nn {
namespace {

using test::expect_allclose;

// Running statistics and affine parameters far from their initial values, so that the folding
// is exercised.
void randomize(BatchNorm& bn) {
  NoGradGuard no_grad;
  bn.running_mean.copy_(randn(bn.running_mean.shape()));
  bn.running_var.copy_(add(rand(bn.running_var.shape()), 0.5));
  if (bn.weight.defined()) bn.weight.copy_(randn(bn.weight.shape()));
  if (bn.bias.defined()) bn.bias.copy_(randn(bn.bias.shape()));
}

Tensor unfused(Conv2d& conv, BatchNorm& bn, const Tensor& x, const Tensor& residual, bool r) {
  Tensor y = bn(conv(x));
  if (residual.defined()) y = add(y, residual);
  return r ? relu(y) : y;
}

TEST(ConvBn, EvaluationMatchesTheModulesCalledInTurn) {
  for (int64_t batch : {1, 3}) {
    for (bool conv_bias : {false, true}) {
      for (bool affine : {false, true}) {
        SCOPED_TRACE("batch " + std::to_string(batch) + (conv_bias ? " conv bias" : "") +
                     (affine ? " affine" : ""));
        manual_seed(31);
        Conv2d conv(8, 16, 3, {.padding = 1}, conv_bias);
        BatchNorm2d bn(16, {.affine = affine});
        randomize(bn);
        conv.eval();
        bn.eval();
        Tensor x = randn({batch, 8, 6, 6}), residual = randn({batch, 16, 6, 6});
        NoGradGuard no_grad;
        expect_allclose(conv_bn(conv, bn, x, residual, true), unfused(conv, bn, x, residual, true),
                        1e-5);
        expect_allclose(conv_bn(conv, bn, x), unfused(conv, bn, x, Tensor(), false), 1e-5);
      }
    }
  }
}

// Note [conv-bn fold cache]: the folded scale and shift are kept between calls; every way the
// batch norm's or the conv's numbers can change must be seen.
TEST(ConvBn, FoldedValuesFollowTheModules) {
  manual_seed(35);
  Conv2d conv(8, 16, 3, {.padding = 1}, /*bias=*/true);
  BatchNorm2d bn(16);
  randomize(bn);
  conv.eval();
  bn.eval();
  Tensor x = randn({2, 8, 6, 6});
  NoGradGuard no_grad;
  auto check = [&](const char* what) {
    SCOPED_TRACE(what);
    expect_allclose(conv_bn(conv, bn, x, Tensor(), true), unfused(conv, bn, x, Tensor(), true),
                    1e-5);
  };
  check("first call");
  check("cached");
  randomize(bn);  // in place: copy_ into every tensor
  check("statistics and affine parameters changed in place");
  conv.bias.mul_(3.0);
  check("conv bias changed in place");
  bn.running_var = add(bn.running_var, 1.0);  // a new tensor
  check("running_var replaced");
  bn.options.eps = 0.5;
  check("eps changed");
  {
    BatchNorm2d other(16);  // another module, same conv
    randomize(other);
    other.eval();
    expect_allclose(conv_bn(conv, other, x), unfused(conv, other, x, Tensor(), false), 1e-5);
  }
  check("back to the first module");
}

TEST(ConvBn, HooksTrainingAndGradientsSeeTheModules) {
  manual_seed(32);
  Conv2d conv(4, 6, 3, {.padding = 1});
  BatchNorm2d bn(6);
  randomize(bn);
  Tensor x = randn({1, 4, 5, 5});
  // A hook must see its module's call, so the fused path is not taken.
  int calls = 0;
  conv.register_forward_hook([&](Module&, const Tensor&, const Tensor&) { ++calls; });
  conv.eval();
  bn.eval();
  {
    NoGradGuard no_grad;
    conv_bn(conv, bn, x);
  }
  EXPECT_EQ(calls, 1);
  // Training mode updates the running statistics, as the batch norm module does.
  conv.train();
  bn.train();
  Tensor before = bn.running_mean.clone();
  Tensor y = conv_bn(conv, bn, x, Tensor(), true);
  EXPECT_EQ(calls, 2);
  EXPECT_GT(max(abs(sub(bn.running_mean, before))).item<float>(), 0.0f);
  // In evaluation mode with a gradient being recorded, the fused path gives gradients to the
  // parameters (compared with the modules' in EvaluationWithGradientsFuses...).
  conv.eval();
  bn.eval();
  Tensor z = conv_bn(conv, bn, x, Tensor(), true);
  ASSERT_TRUE(z.requires_grad());
  z.sum().backward();
  ASSERT_TRUE(conv.weight.grad().defined());
  ASSERT_TRUE(bn.weight.grad().defined());
}

// The names of the ops a call dispatched.
template <class F>
std::multiset<std::string> ops_of(F fn) {
  test::RecordOps record;
  fn();
  std::multiset<std::string> names;
  for (const test::RecordedCall& call : record.calls()) names.insert(call.op->name());
  return names;
}

// Note [conv-bn inference]: with a gradient being recorded, evaluation still folds, and the
// gradients of the input and of every parameter equal the modules' (called one by one).
TEST(ConvBn, EvaluationWithGradientsFusesAndGradientsMatchTheModules) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    manual_seed(36);
    Conv2d conv(8, 16, 3, {.padding = 1}, /*bias=*/true);
    BatchNorm2d bn(16);
    randomize(bn);
    conv.to(dt);
    bn.to(dt);
    conv.eval();
    bn.eval();
    Tensor x = to_dtype(randn({2, 8, 6, 6}), dt), residual = to_dtype(randn({2, 16, 6, 6}), dt);
    Tensor r =
        to_dtype(randn({2, 16, 6, 6}), dt);  // weights the outputs: gradients differ per element
    x.set_requires_grad(true);
    const std::vector<Tensor*> wrt{&x, &conv.weight, &conv.bias, &bn.weight, &bn.bias};
    auto gradients = [&](bool fused) {
      for (Tensor* t : wrt) t->set_grad(Tensor());
      Tensor y =
          fused ? conv_bn(conv, bn, x, residual, true) : unfused(conv, bn, x, residual, true);
      mul(y, r).sum().backward();
      std::vector<Tensor> grads;
      for (Tensor* t : wrt) grads.push_back(t->grad());
      return std::pair{y.detach(), grads};
    };
    auto [want_y, want] = gradients(false);
    std::pair<Tensor, std::vector<Tensor>> got;
    const std::multiset<std::string> ops = ops_of([&] { got = gradients(true); });
    EXPECT_EQ(ops.count("conv_bn_fold"), 1u);
    EXPECT_EQ(ops.count("batch_norm"), 0u);
    const double tol = dt == DType::Float32 ? 1e-5 : 1e-12;
    expect_allclose(got.first, want_y, tol);
    for (size_t i = 0; i < wrt.size(); ++i) {
      SCOPED_TRACE("gradient " + std::to_string(i));
      ASSERT_TRUE(got.second[i].defined());
      expect_allclose(got.second[i], want[i], tol);
    }
  }
}

// Note [conv-bn fold cache]: a pushed dispatch mode sees the fold on every call, cached or not;
// without one, repeated evaluation calls take the folded values from the cache.
TEST(ConvBn, ModesSeeTheFoldOnEveryCall) {
  manual_seed(37);
  Conv2d conv(4, 8, 3, {.padding = 1});
  BatchNorm2d bn(8);
  randomize(bn);
  conv.eval();
  bn.eval();
  Tensor x = randn({1, 4, 5, 5});
  NoGradGuard no_grad;
  conv_bn(conv, bn, x);  // fills the cache
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(ops_of([&] { conv_bn(conv, bn, x); }).count("conv_bn_fold"), 1u);
  // The values seen by a mode are the cache's: both follow the modules.
  Tensor traced;
  {
    test::RecordOps record;
    traced = conv_bn(conv, bn, x);
  }
  expect_allclose(traced, conv_bn(conv, bn, x), 0.0);
}

TEST(ConvBn, FoldErrorsNameTheOpAndTheOperand) {
  test::expect_error(
      [] { conv_bn_fold(zeros({3}), ones({4}), Tensor(), Tensor(), Tensor(), 1e-5); },
      {"[conv_bn_fold]", "running_var of shape [3]", "[4]"});
  test::expect_error(
      [] {
        conv_bn_fold(zeros({3}), ones({3}), ones({3}, {DType::Float64}), Tensor(), Tensor(), 1e-5);
      },
      {"[conv_bn_fold]", "weight of shape [3], dtype float32"});
  test::expect_error([] { conv_bn_fold(Tensor(), ones({3}), Tensor(), Tensor(), Tensor(), 1e-5); },
                     {"[conv_bn_fold] expected running_mean and running_var"});
}

// The models that use conv_bn give the same logits on the fused kernel (no grad: one
// conv2d_affine op) as on the fused composition (gradients recorded: conv2d, channel_affine, add,
// relu).
TEST(ConvBn, ModelsAgreeWithAndWithoutTheFusedPath) {
  manual_seed(33);
  struct Case {
    std::shared_ptr<Module> model;
    Shape input;
  };
  std::vector<Case> cases{{resnet18(3, 10), {1, 3, 16, 16}},
                          {small_cnn(1, 10, 28), {1, 1, 28, 28}}};
  for (Case& c : cases) {
    SCOPED_TRACE(c.model->type_name());
    for (auto& [name, m] : c.model->named_modules())
      if (auto* bn = dynamic_cast<BatchNorm*>(m)) randomize(*bn);
    c.model->eval();
    Tensor x = randn(c.input);
    Tensor reference = (*c.model)(x).detach();
    NoGradGuard no_grad;
    expect_allclose((*c.model)(x), reference, 1e-5);
  }
}

// Note [low-precision conv epilogue]: in evaluation under bfloat16 autocast (and for a model
// converted to bfloat16), the fold is float32 and a block's activations stay bfloat16 from one
// convolution to the next: no channel_affine, no cast of an activation between the two.
TEST(ConvBn, Bfloat16EvaluationKeepsTheActivationsInBfloat16) {
  manual_seed(38);
  Conv2d conv1(8, 16, 3, {.padding = 1}), conv2(16, 16, 3, {.padding = 1});
  BatchNorm2d bn1(16), bn2(16);
  for (BatchNorm* bn : {&bn1, &bn2}) randomize(*bn);
  for (Module* m : std::initializer_list<Module*>{&conv1, &conv2, &bn1, &bn2}) m->eval();
  auto block = [&](const Tensor& x) {
    Tensor y = conv_bn(conv1, bn1, x, Tensor(), true);
    return conv_bn(conv2, bn2, y, y, true);
  };
  Tensor x = randn({2, 8, 6, 6});
  NoGradGuard no_grad;
  const Tensor want = unfused(conv2, bn2, relu(bn1(conv1(x))), relu(bn1(conv1(x))), true);
  const double scale = max(abs(want)).item();
  auto close = [&](const Tensor& got) {
    ASSERT_EQ(got.dtype(), DType::BFloat16);
    const double err = max(abs(sub(got.to(DType::Float32), want))).item();
    EXPECT_LE(err, 3e-2 * scale);
  };
  std::vector<test::RecordedCall> calls;
  Tensor got;
  {
    AutocastGuard region(DType::BFloat16, {.force = true});
    test::RecordOps record;
    got = block(x);
    calls = record.calls();
  }
  close(got);
  int fold = 0, affine = 0, activation_casts = 0;
  for (const test::RecordedCall& call : calls) {
    const std::string name = call.op->name();
    if (name == "conv_bn_fold") {
      ++fold;
      for (const Tensor& t : call.inputs) {
        if (t.defined()) {
          EXPECT_EQ(t.dtype(), DType::Float32);
        }
      }
    }
    affine += name == "channel_affine";
    // The input's one cast to bfloat16 and the weights'; nothing 4-D with 16 channels.
    if (name == "to_dtype" && call.inputs[0].dim() == 4 && call.inputs[0].size(1) == 16 &&
        call.inputs[0].size(0) == 2)
      ++activation_casts;
  }
  EXPECT_EQ(fold, 2);
  EXPECT_EQ(affine, has_native_low_precision(DType::BFloat16) ? 0 : 2);
  if (has_native_low_precision(DType::BFloat16)) {
    EXPECT_EQ(activation_casts, 0);
  }
  // The modules themselves in bfloat16 (no autocast): the fold runs in float32 all the same.
  for (Module* m : std::initializer_list<Module*>{&conv1, &conv2, &bn1, &bn2})
    m->to(DType::BFloat16);
  close(block(x.to(DType::BFloat16)));
}

// Autocast leaves float64 alone (as PyTorch does), so a float64 model folds in float64 inside a
// region too.
TEST(ConvBn, Float64EvaluationUnderAutocastStaysFloat64) {
  manual_seed(39);
  Conv2d conv(4, 8, 3, {.padding = 1});
  BatchNorm2d bn(8);
  randomize(bn);
  conv.to(DType::Float64);
  bn.to(DType::Float64);
  conv.eval();
  bn.eval();
  Tensor x = randn({2, 4, 5, 5}, {DType::Float64});
  NoGradGuard no_grad;
  const Tensor want = unfused(conv, bn, x, Tensor(), true);
  AutocastGuard region(DType::BFloat16, {.force = true});
  const Tensor got = conv_bn(conv, bn, x, Tensor(), true);
  ASSERT_EQ(got.dtype(), DType::Float64);
  expect_allclose(got, want, 1e-12);
}

}  // namespace
}  // namespace kiln::nn
