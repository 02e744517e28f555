// Custom functions (kiln/autograd/function.h).
#include "kiln/autograd/function.h"

#include <gtest/gtest.h>

#include "tests/support/test_util.h"

#include <cmath>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;
using test::expect_values;
using test::leaf;

using autograd::FunctionCtx;

std::string here(int line) {
  return "test_function.cpp:" + std::to_string(line);
}

// exp whose backward reuses the saved output: d/dx exp(x) = exp(x).
struct MyExp : autograd::Function<MyExp> {
  static constexpr const char* kName = "my_exp";
  static inline int forward_calls = 0;
  static std::vector<Tensor> forward(FunctionCtx& ctx, const std::vector<Tensor>& in) {
    ++forward_calls;
    EXPECT_FALSE(GradMode::is_enabled());  // forward runs under NoGradGuard
    Tensor y = exp(in[0]);
    ctx.save_for_backward({y});
    return {y};
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    return {mul(grads[0], ctx.saved_tensors()[0])};
  }
};

// a * b * scale with two inputs, two outputs (the product and a copy of b), scale from attrs.
struct ScaledMul : autograd::Function<ScaledMul> {
  static constexpr const char* kName = "scaled_mul";
  static inline std::vector<bool> seen_needs;
  static std::vector<Tensor> forward(FunctionCtx& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0], in[1]});
    double s = ctx.attrs.value("scale", 1.0);
    return {mul(mul(in[0], in[1]), s), clone(in[1])};
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    seen_needs = ctx.needs_input_grad;
    std::vector<Tensor> s = ctx.saved_tensors();
    double scale = ctx.attrs["scale"].get<double>();
    Tensor ga = ctx.needs_input_grad[0] ? mul(mul(grads[0], s[1]), scale) : Tensor();
    Tensor gb = ctx.needs_input_grad[1] ? add(mul(mul(grads[0], s[0]), scale), grads[1]) : Tensor();
    return {ga, gb};
  }
};

// Returns a gradient of the wrong shape.
struct BadShape : autograd::Function<BadShape> {
  static constexpr const char* kName = "bad_shape";
  static std::vector<Tensor> forward(FunctionCtx&, const std::vector<Tensor>& in) {
    return {mul(in[0], 2.0)};
  }
  static std::vector<Tensor> backward(FunctionCtx&, const std::vector<Tensor>& grads) {
    return {sum(grads[0])};
  }
};

// Returns too many gradients.
struct BadCount : autograd::Function<BadCount> {
  static constexpr const char* kName = "bad_count";
  static std::vector<Tensor> forward(FunctionCtx&, const std::vector<Tensor>& in) {
    return {mul(in[0], 2.0)};
  }
  static std::vector<Tensor> backward(FunctionCtx&, const std::vector<Tensor>& grads) {
    return {grads[0], grads[0]};
  }
};

// Identity that returns its input tensor itself.
struct Passthrough : autograd::Function<Passthrough> {
  static constexpr const char* kName = "passthrough";
  static std::vector<Tensor> forward(FunctionCtx&, const std::vector<Tensor>& in) {
    return {in[0]};
  }
  static std::vector<Tensor> backward(FunctionCtx&, const std::vector<Tensor>& grads) {
    return {mul(grads[0], 3.0)};  // a recognizable "gradient"
  }
};

TEST(Function, CustomExpForwardAndBackward) {
  Tensor x = leaf({0.0, 1.0, -2.0});
  Tensor y = MyExp::apply({x})[0];
  expect_values(y, {1.0, std::exp(1.0), std::exp(-2.0)});
  ASSERT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "my_exp");
  EXPECT_EQ(y.output_nr(), 0u);
  ASSERT_EQ(y.grad_fn()->next_edges.size(), 1u);
  EXPECT_EQ(y.grad_fn()->next_edges[0].fn->name(), "AccumulateGrad");
  sum(y).backward();
  expect_values(x.grad(), {1.0, std::exp(1.0), std::exp(-2.0)});
}

TEST(Function, GradcheckAndGradgradcheck) {
  Tensor x = sample_tensor({2, 3}, 7, -1.0, 1.0);
  TensorFn f = [](const std::vector<Tensor>& in) { return MyExp::apply({in[0]}); };
  EXPECT_TRUE(gradcheck(f, {x}));
  // backward uses kiln ops and the saved output re-attached to this node: twice differentiable.
  EXPECT_TRUE(gradgradcheck(f, {x}));
  TensorFn g = [](const std::vector<Tensor>& in) {
    return ScaledMul::apply({in[0], in[1]}, {{"scale", 1.5}});
  };
  EXPECT_TRUE(gradcheck(g, {sample_tensor({3}, 1), sample_tensor({3}, 2)}));
  EXPECT_TRUE(gradgradcheck(g, {sample_tensor({3}, 1), sample_tensor({3}, 2)}));
}

TEST(Function, SecondDerivativeThroughCustomFunction) {
  Tensor x = leaf({0.5, -1.0});
  Tensor y = MyExp::apply({x})[0];
  Tensor g = grad({sum(y)}, {x}, {}, false, true)[0];
  ASSERT_TRUE(g.requires_grad());
  expect_values(g, {std::exp(0.5), std::exp(-1.0)});
  Tensor gg = grad({sum(g)}, {x})[0];
  expect_values(gg, {std::exp(0.5), std::exp(-1.0)});
}

TEST(Function, MultipleInputsOutputsAttrsAndNeedsInputGrad) {
  Tensor a = leaf({1.0, 2.0});
  Tensor b = tensor({3.0, 4.0}, {DType::Float64});  // does not require grad
  std::vector<Tensor> out = ScaledMul::apply({a, b}, {{"scale", 2.0}});
  ASSERT_EQ(out.size(), 2u);
  expect_values(out[0], {6.0, 16.0});
  EXPECT_EQ(out[0].output_nr(), 0u);
  EXPECT_EQ(out[1].output_nr(), 1u);
  EXPECT_TRUE(out[0].grad_fn() == out[1].grad_fn());
  EXPECT_TRUE(out[0].grad_fn()->next_edges[1].fn == nullptr);
  // Only out[0] is used: the gradient for out[1] arrives as zeros.
  sum(out[0]).backward();
  EXPECT_EQ(ScaledMul::seen_needs, (std::vector<bool>{true, false}));
  expect_values(a.grad(), {6.0, 8.0});
  EXPECT_FALSE(b.grad().defined());
}

TEST(Function, NoRecordingWithoutGradOrUnderNoGrad) {
  Tensor x = tensor({1.0}, {DType::Float64});
  Tensor y = MyExp::apply({x})[0];
  EXPECT_FALSE(y.requires_grad());
  Tensor z = leaf({1.0});
  {
    NoGradGuard no_grad;
    Tensor w = MyExp::apply({z})[0];
    EXPECT_FALSE(w.requires_grad());
    EXPECT_TRUE(w.grad_fn() == nullptr);
  }
}

TEST(Function, WrongShapedGradientNamesTheFunction) {
  Tensor x = leaf({1.0, 2.0, 3.0});
  int line = __LINE__ + 1;
  Tensor y = BadShape::apply({x})[0];
  std::string what = error_of([&] { sum(y).backward(); });
  expect_contains(what, {"[bad_shape]", "gradient for input 0", "float64[3] on cpu",
                         "float64[] on cpu", here(line)});
}

TEST(Function, WrongNumberOfGradientsNamesTheFunction) {
  Tensor x = leaf({1.0, 2.0});
  int line = __LINE__ + 1;
  Tensor y = BadCount::apply({x})[0];
  std::string what = error_of([&] { sum(y).backward(); });
  expect_contains(what, {"[bad_count]", "one gradient per input", "(1)", "returned 2", here(line)});
}

TEST(Function, SavedOutputModifiedInPlaceIsAnError) {
  Tensor x = leaf({1.0, 2.0});
  int apply_line = __LINE__ + 1;
  Tensor y = MyExp::apply({x})[0];
  int mul_line = __LINE__ + 1;
  y.mul_(2.0);
  std::string what = error_of([&] { sum(y).backward(); });
  expect_contains(what, {"my_exp", "mul_", "modified in place", here(apply_line), here(mul_line)});
}

TEST(Function, SecondBackwardWithoutRetainGraph) {
  Tensor x = leaf({1.0});
  Tensor y = sum(MyExp::apply({x})[0]);
  y.backward();
  std::string what = error_of([&] { y.backward(); });
  expect_contains(what, {"second time", "my_exp", "retain_graph"});
  Tensor z = sum(MyExp::apply({x})[0]);
  z.backward({}, true);
  z.backward();
  expect_values(x.grad(), {3 * std::exp(1.0)});
}

TEST(Function, ReturningAnInputKeepsTheCallersTensorALeaf) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = Passthrough::apply({x})[0];
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_FALSE(y.is_same(x));
  EXPECT_EQ(y.storage(), x.storage());
  sum(y).backward();
  expect_values(x.grad(), {3.0, 3.0});
}

TEST(Function, LongChainOfCustomFunctions) {
  Tensor x = leaf({1.0});
  Tensor y = x;
  for (int i = 0; i < 50000; ++i) y = Passthrough::apply({y})[0];
  y = Tensor();  // freeing the chain must not recurse once per node
  Tensor z = x;
  for (int i = 0; i < 5; ++i) z = Passthrough::apply({z})[0];
  sum(z).backward();
  expect_values(x.grad(), {243.0});
}

TEST(Function, ForwardRunsOnceAndUndefinedInputIsAnError) {
  MyExp::forward_calls = 0;
  Tensor x = leaf({1.0});
  MyExp::apply({x});
  EXPECT_EQ(MyExp::forward_calls, 1);
  int line = __LINE__ + 1;
  std::string what = error_of([&] { MyExp::apply({Tensor()}); });
  expect_contains(what, {"[my_exp]", "input 0", "undefined", here(line)});
}

TEST(Function, HooksOnOutputs) {
  Tensor x = leaf({0.0});
  Tensor y = MyExp::apply({x})[0];
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return mul(g, 10.0);
  });
  sum(y).backward();
  EXPECT_EQ(seen, (std::vector<double>{1.0}));
  expect_values(x.grad(), {10.0});
}

}  // namespace
}  // namespace kiln
