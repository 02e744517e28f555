// A custom function's call is one op in the dispatcher's stream (Note [function op]).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/function.h"
#include "kiln/autograd/node.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/unary.h"
#include "tests/support/op_recorder.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using autograd::FunctionCtx;
using test::expect_allclose;
using test::expect_error;

// y = exp(x) * factor, with factor an attribute; registered, so make_op can rebuild it.
struct ScaledExp : autograd::Function<ScaledExp> {
  static constexpr const char* kName = "test_scaled_exp";
  static std::vector<Tensor> forward(FunctionCtx& ctx, const std::vector<Tensor>& in) {
    Tensor y = mul(exp(in[0]), ctx.attrs.at("factor").get<double>());
    ctx.save_for_backward({y});
    return {y};
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    return {mul(grads[0], ctx.saved_tensors()[0])};
  }
};
KILN_REGISTER_FUNCTION(ScaledExp);

// Not registered: it runs, but cannot be rebuilt from (name, attrs).
struct Unregistered : autograd::Function<Unregistered> {
  static constexpr const char* kName = "test_unregistered_function";
  static std::vector<Tensor> forward(FunctionCtx&, const std::vector<Tensor>& in) {
    return {neg(in[0])};
  }
  static std::vector<Tensor> backward(FunctionCtx&, const std::vector<Tensor>& grads) {
    return {neg(grads[0])};
  }
};

TEST(FunctionOp, ACallIsOneOpWithTheFunctionsNameAndAttrs) {
  Tensor x = sample_tensor({3}, 1);
  test::RecordOps rec;
  Tensor y = ScaledExp::apply({x}, {{"factor", 2.5}})[0];
  ASSERT_EQ(rec.calls().size(), 1u);  // exp and mul stay inside the function
  EXPECT_STREQ(rec.calls()[0].op->name(), "test_scaled_exp");
  EXPECT_EQ(rec.calls()[0].op->attrs(), (nlohmann::json{{"factor", 2.5}}));
  EXPECT_TRUE(rec.calls()[0].outputs[0].is_same(y));
  expect_allclose(y, mul(exp(x), 2.5), 1e-15);
}

TEST(FunctionOp, GradientsStillComeFromTheUsersBackward) {
  Tensor x = sample_tensor({4}, 2);
  x.set_requires_grad(true);
  Tensor y = ScaledExp::apply({x}, {{"factor", 3.0}})[0];
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "test_scaled_exp");
  Tensor g = grad({sum(y)}, {x})[0];
  NoGradGuard no_grad;
  expect_allclose(g, mul(exp(x), 3.0), 1e-15);
}

TEST(FunctionOp, ARegisteredFunctionIsRebuiltFromNameAndAttrs) {
  Tensor x = sample_tensor({2, 3}, 3);
  Tensor y = ScaledExp::apply({x}, {{"factor", 0.5}})[0];
  OpPtr op = make_op("test_scaled_exp", {{"factor", 0.5}});
  // Dispatched twice: the rebuilt op runs its forward on every call.
  for (int i = 0; i < 2; ++i) {
    Tensor again = dispatch(op, {x}, Loc::current())[0];
    EXPECT_EQ(again.to_vector<double>(), y.to_vector<double>());
  }
  EXPECT_TRUE(op_equivalent(*op, *make_op("test_scaled_exp", {{"factor", 0.5}})));
  EXPECT_FALSE(op_equivalent(*op, *make_op("test_scaled_exp", {{"factor", 1.5}})));
}

TEST(FunctionOp, AnUnregisteredFunctionRunsButCannotBeRebuilt) {
  Tensor x = sample_tensor({2}, 4);
  test::RecordOps rec;
  Unregistered::apply({x});
  ASSERT_EQ(rec.calls().size(), 1u);
  EXPECT_STREQ(rec.calls()[0].op->name(), "test_unregistered_function");
  expect_error([] { make_op("test_unregistered_function", nlohmann::json::object()); },
               {"test_unregistered_function"});
}

TEST(FunctionOp, OnMetaInputsTheForwardIsTheShapeInference) {
  Tensor x = sample_tensor({2, 5}, 5).to(kMeta);
  Tensor y = ScaledExp::apply({x}, {{"factor", 2.0}})[0];
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), (Shape{2, 5}));
}

}  // namespace
}  // namespace kiln
