// Note [optimizer updates are ops]: each parameter's update is one dispatched op.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "tests/support/op_recorder.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

TEST(UpdateOps, AStepIsOneUpdateOpPerParameterWithAGradient) {
  Tensor a = test::leaf({1.0, 2.0}), b = test::leaf({3.0}), c = test::leaf({4.0});
  optim::Adam adam({a, b, c}, {.lr = 0.1});
  a.set_grad(tensor({0.5, -0.5}, {DType::Float64}));
  c.set_grad(tensor({1.0}, {DType::Float64}));
  test::RecordOps record;
  adam.step();
  int updates = 0;
  for (const auto& call : record.calls()) {
    if (std::string(call.op->name()) != "adam_update") continue;
    ++updates;
    EXPECT_EQ(call.op->mutates() & 1u, 1u) << "writes the parameter";
    EXPECT_EQ(call.op->mutates() & 2u, 0u) << "reads the gradient";
    EXPECT_EQ(call.op->attrs()["step"], 1);
    EXPECT_EQ(call.op->attrs()["lr"], 0.1);
  }
  EXPECT_EQ(updates, 2);
}

TEST(UpdateOps, RebuiltFromAttrsTheUpdateRunsOnMetaAndRefusesBadInputs) {
  nlohmann::json attrs = {{"lr", 0.1},           {"momentum", 0.0},   {"dampening", 0.0},
                          {"weight_decay", 0.0}, {"nesterov", false}, {"maximize", false},
                          {"first_step", false}};
  OpPtr op = make_op("sgd_update", attrs);
  Tensor p = empty({2, 3}, {DType::Float32, kMeta}), g = empty({2, 3}, {DType::Float32, kMeta});
  std::vector<Tensor> out = dispatch(op, {p, g}, Loc::current());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].is_same(p)) << "the output is the written parameter";
  Tensor real = tensor({1.0, 2.0}, {DType::Float32});
  dispatch(op, {real, tensor({1.0, 1.0}, {DType::Float32})}, Loc::current());
  test::expect_values(real, {0.9, 1.9}, 1e-6);
  test::expect_error(
      [&] {
        dispatch(op, {real, tensor({1.0}, {DType::Float32})}, Loc::current());
      },
      {"[sgd_update] expected tensor 1 of the parameter's shape and dtype"});
  // Attributes are read when the update runs; a missing one is named.
  OpPtr partial = make_op("adam_update", {{"lr", 0.1}});
  Tensor m = zeros({2}), v = zeros({2});
  test::expect_error(
      [&] {
        dispatch(partial, {real, tensor({1.0, 1.0}, {DType::Float32}), m, v}, Loc::current());
      },
      {"op 'adam_update'", "is missing"});
}

}  // namespace
}  // namespace kiln
