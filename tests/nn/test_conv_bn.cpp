// Note [conv-bn inference]: the fused evaluation path of conv -> batch norm (-> + residual)
// (-> relu) against the modules called one by one, and when it must not be taken.
#include "kiln/nn/conv_bn.h"

#include <gtest/gtest.h>

#include "kiln/core/grad_mode.h"
#include "kiln/kiln.h"
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
  // In evaluation mode with a gradient being recorded, gradients reach the parameters.
  conv.eval();
  bn.eval();
  Tensor z = conv_bn(conv, bn, x, Tensor(), true);
  ASSERT_TRUE(z.requires_grad());
  z.sum().backward();
  ASSERT_TRUE(conv.weight.grad().defined());
  ASSERT_TRUE(bn.weight.grad().defined());
}

// The models that use conv_bn give the same logits on the fused path (no grad) as on the
// modules' path (gradients recorded).
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

}  // namespace
}  // namespace kiln::nn
