// Note [optimizer updates are ops]: each parameter's update is one dispatched op.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/optimizer_update.h"
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

// Note [updates in graphs]: the updates an optimizer's step would dispatch, collected and then
// run with their numbers from rows of a hyper matrix, change the parameters and the state exactly
// as the step itself does, for every optimizer, over steps whose numbers change.
class Collect final : public detail::UpdateSink {
 public:
  void take(detail::OptimizerUpdate kind, nlohmann::json attrs,
            const std::vector<Tensor>& tensors) override {
    calls.push_back({kind, std::move(attrs), tensors});
  }
  struct Call {
    detail::OptimizerUpdate kind;
    nlohmann::json attrs;
    std::vector<Tensor> tensors;
  };
  std::vector<Call> calls;
};

TEST(UpdateOps, UpdatesFromHyperRowsEqualTheOptimizersOwnSteps) {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<const char*, Make>> optimizers = {
      {"sgd",
       [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::SGD>(
             std::move(p), optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
       }},
      {"adam",
       [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::Adam>(
             std::move(p), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
       }},
      {"rmsprop",
       [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::RMSprop>(
             std::move(p), optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true});
       }},
      {"adagrad",
       [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::Adagrad>(
             std::move(p), optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.01});
       }},
  };
  for (const auto& [name, make] : optimizers) {
    SCOPED_TRACE(name);
    manual_seed(4);
    const Tensor init = randn({3, 5}, {DType::Float64});
    Tensor a = init.clone(), b = init.clone();
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    auto direct = make({a});
    auto collected = make({b});
    for (int step = 1; step <= 4; ++step) {
      const Tensor g = randn({3, 5}, {DType::Float64});
      direct->param_groups()[0].set_lr(0.1 / step);
      collected->param_groups()[0].set_lr(0.1 / step);
      a.set_grad(g);
      direct->step();
      b.set_grad(g);
      const Tensor before = b.detach().clone();
      Collect sink;
      {
        detail::UpdateSinkScope scope(&sink);
        collected->step();
      }
      test::expect_bit_identical(b.detach(), before);  // a collected step computes nothing
      ASSERT_EQ(sink.calls.size(), 1u);
      const std::vector<double> row = detail::update_hyper_values(sink.calls[0].attrs);
      // Row 1 of a two-row matrix; row 0 is noise the update must not read.
      Tensor hyper = full({2, static_cast<int64_t>(row.size()) + 1}, -7.0, {DType::Float64});
      for (size_t c = 0; c < row.size(); ++c)
        static_cast<double*>(hyper.raw_data())[hyper.shape()[1] + static_cast<int64_t>(c)] = row[c];
      nlohmann::json baked = sink.calls[0].attrs;
      for (auto& [key, v] : baked.items())
        if (detail::is_update_hyper(key, v))
          v = v.is_boolean()          ? nlohmann::json(!v.get<bool>())
              : v.is_number_integer() ? nlohmann::json(999)
                                      : nlohmann::json(12345.5);
      NoGradGuard no_grad;
      detail::optimizer_update_from(sink.calls[0].kind, baked, sink.calls[0].tensors, hyper, 1,
                                    Loc::current());
      test::expect_bit_identical(b.detach(), a.detach());
    }
    const optim::OptimizerState sa = direct->state_dict(), sb = collected->state_dict();
    EXPECT_EQ(sa.meta, sb.meta);
    for (const auto& [key, t] : sa.tensors) test::expect_bit_identical(sb.tensors.at(key), t);
  }
}

TEST(UpdateOps, AHyperMatrixThatDoesNotFitIsRefused) {
  nlohmann::json attrs = {{"lr", 0.1},           {"momentum", 0.0},   {"dampening", 0.0},
                          {"weight_decay", 0.0}, {"nesterov", false}, {"maximize", false},
                          {"first_step", false}};
  Tensor p = zeros({2}), g = ones({2});
  test::expect_error(
      [&] {
        detail::optimizer_update_from(detail::OptimizerUpdate::kSgd, attrs, {p, g},
                                      zeros({1, 7}, {DType::Float64}), 1, Loc::current());
      },
      {"[sgd_update] expected input 2 to be a float64 matrix with a row 1 of at least 7 numbers"});
  test::expect_error(
      [&] {
        detail::optimizer_update_from(detail::OptimizerUpdate::kSgd, attrs, {p, g}, zeros({1, 3}),
                                      0, Loc::current());
      },
      {"at least 7 numbers", "float32[1, 3]"});
}

}  // namespace
}  // namespace kiln
