#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/optim/adagrad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"
#include "tests/support/test_util.h"

namespace kiln::optim {
namespace {

using test::expect_error;
using test::expect_values;

Tensor param(std::vector<double> values, DType dtype = DType::Float64) {
  Tensor p = tensor(values, std::nullopt, TensorOptions{dtype});
  p.set_requires_grad(true);
  return p;
}

Tensor sample_param(Shape shape, uint64_t seed, DType dtype = DType::Float64) {
  Tensor p = sample_tensor(std::move(shape), seed).to(dtype);
  p.set_requires_grad(true);
  return p;
}

// --- construction and options ------------------------------------------------------------------

TEST(Optimizer, RejectsParametersThatAreNotTrainableLeaves) {
  Tensor w = param({1, 2});
  Tensor derived = mul(w, 2.0);
  expect_error([&] { SGD({derived}, {.lr = 0.1}); },
               {"[SGD]", "non-leaf", "float64[2]", "test_optimizer.cpp"});
  Tensor frozen = tensor({1.0, 2.0});
  expect_error([&] { Adam({frozen}); },
               {"[Adam]", "requires grad", "requires_grad=false", "test_optimizer.cpp"});
  expect_error([&] { Adam(std::vector<Tensor>{}); }, {"[Adam]", "at least one parameter"});
  expect_error([&] { SGD({w, w}, {.lr = 0.1}); }, {"[SGD]", "appears twice"});
}

TEST(Optimizer, ValidatesHyperparameters) {
  Tensor w = param({1, 2});
  expect_error([&] { SGD({w}, {}); }, {"[SGD]", "learning rate", "test_optimizer.cpp"});
  expect_error([&] { SGD({w}, {.lr = -1.0}); }, {"[SGD]", "lr >= 0", "-1"});
  expect_error([&] { SGD({w}, {.lr = 0.1, .nesterov = true}); },
               {"[SGD]", "Nesterov", "momentum 0"});
  expect_error([&] { Adam({w}, {.betas = {0.9, 1.0}}); }, {"[Adam]", "betas[1] < 1"});
  expect_error([&] { RMSprop({w}, {.alpha = -0.5}); }, {"[RMSprop]", "alpha >= 0"});
  expect_error([&] { Adagrad({w}, {.eps = -1.0}); }, {"[Adagrad]", "eps >= 0"});
  expect_error(
      [&] {
        SGD({ParamGroup{{w}, {{"learning_rate", 0.1}}}}, {.lr = 0.1});
      },
      {"[SGD]", "unknown option 'learning_rate'", "momentum"});
  expect_error(
      [&] {
        Adam({ParamGroup{{w}, {{"lr", "fast"}}}});
      },
      {"[Adam]", "number for the option 'lr'", "\"fast\""});
}

// Built through std::make_unique / std::make_shared, the constructor's defaulted location lies in
// the standard library; the error names this file (the stack's first frame outside kiln and std).
TEST(Optimizer, ErrorsThroughMakeUniqueNameTheCallerNotTheStandardLibrary) {
  Tensor w = param({1, 2});
  for (const auto& make : std::vector<std::function<void()>>{
           [&] { (void)std::make_unique<Adam>(std::vector<Tensor>{w}, AdamOptions{.lr = -1.0}); },
           [&] { (void)std::make_shared<SGD>(std::vector<Tensor>{w}, SGDOptions{.lr = -1.0}); }}) {
    try {
      make();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("test_optimizer.cpp"), std::string::npos) << text;
      EXPECT_EQ(text.find("unique_ptr.h"), std::string::npos) << text;
      EXPECT_EQ(text.find("stl_construct.h"), std::string::npos) << text;
    }
  }
}

TEST(Optimizer, GroupsTakeMissingOptionsFromTheDefaults) {
  Tensor a = param({1}), b = param({2});
  Adam opt({ParamGroup{{a}}, ParamGroup{{b}, {{"lr", 0.5}}}}, {.lr = 0.1, .weight_decay = 0.2});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(opt.param_groups()[1].lr(), 0.5);
  EXPECT_EQ(opt.param_groups()[1].number("weight_decay"), 0.2);
  EXPECT_FALSE(opt.param_groups()[1].flag("amsgrad"));
  Tensor c = param({3});
  opt.add_param_group(ParamGroup{{c}, {{"eps", 1e-3}}});
  EXPECT_EQ(opt.param_groups()[2].number("eps"), 1e-3);
  EXPECT_EQ(opt.param_groups()[2].lr(), 0.1);
  expect_error([&] { opt.add_param_group(ParamGroup{{a}}); }, {"[Adam]", "appears twice"});
}

// --- steps
// ----------------------------------------------------------------------------------------

TEST(Optimizer, SgdStepsByHand) {
  Tensor w = param({1.0, 2.0});
  SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  w.set_grad(tensor({0.5, -1.0}, {DType::Float64}));
  opt.step();
  expect_values(w, {0.95, 2.1});  // buf = g on the first step
  opt.step();
  // buf = 0.9 * g + g = 1.9 g
  expect_values(w, {0.95 - 0.1 * 0.95, 2.1 + 0.1 * 1.9});
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(opt.state(0, 0).step, 2);
  expect_values(opt.state(0, 0).tensors.at("momentum_buffer"), {0.95, -1.9});
}

TEST(Optimizer, AdamFirstStepMovesByLrTimesSign) {
  Tensor w = param({1.0, -2.0, 3.0});
  Adam opt({w}, {.lr = 0.01});
  w.set_grad(tensor({0.3, -4.0, 1e-3}, {DType::Float64}));
  opt.step();
  // m_hat = g, v_hat = g^2: the step is lr * g / (|g| + eps).
  expect_values(w,
                {1.0 - 0.01 * 0.3 / (0.3 + 1e-8), -2.0 + 0.01 * 4.0 / (4.0 + 1e-8),
                 3.0 - 0.01 * 1e-3 / (1e-3 + 1e-8)},
                1e-15);
  EXPECT_EQ(opt.state(0, 0).step, 1);
}

TEST(Optimizer, ParametersWithoutGradientsAreSkipped) {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  Adam opt({a, b}, {.lr = 0.1});
  a.set_grad(tensor({1.0, 1.0}, {DType::Float64}));
  opt.step();
  expect_values(b, {3.0});
  EXPECT_FALSE(opt.state(0, 1).initialized);
  EXPECT_TRUE(opt.state(0, 1).tensors.empty());
  EXPECT_EQ(opt.state(0, 0).step, 1);
}

TEST(Optimizer, StepBumpsTheVersionAndRecordsNoHistory) {
  Tensor w = param({1.0, 2.0});
  Tensor saved = mul(w, w);  // saves w for backward
  SGD opt({w}, {.lr = 0.1});
  uint64_t before = w.version();
  w.set_grad(ones_like(w));
  opt.step();
  EXPECT_GT(w.version(), before);
  EXPECT_TRUE(w.is_leaf());
  EXPECT_EQ(w.grad_fn(), nullptr);
}

TEST(Optimizer, GradientOfTheWrongShapeNamesTheParameter) {
  Tensor a = param({1.0, 2.0}), b = param({1.0, 2.0, 3.0});
  SGD opt({a, b}, {.lr = 0.1});
  b.set_grad(tensor({1.0, 2.0}, {DType::Float64}));
  expect_error([&] { opt.step(); }, {"[SGD.step]", "parameter 1 of group 0", "float64[3]",
                                     "float64[2]", "test_optimizer.cpp"});
}

TEST(Optimizer, ZeroGradDropsOrZeroes) {
  Tensor w = param({1.0, 2.0});
  SGD opt({w}, {.lr = 0.1});
  Tensor loss = sum(mul(w, w));
  loss.backward();
  Tensor g = w.grad();
  ASSERT_TRUE(g.defined());
  opt.zero_grad(false);
  ASSERT_TRUE(w.grad().defined());
  expect_values(w.grad(), {0.0, 0.0});
  expect_values(g, {0.0, 0.0});  // zeroed in place, like PyTorch
  opt.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Optimizer, ClosureStepReturnsTheLoss) {
  Tensor w = param({3.0});
  SGD opt({w}, {.lr = 0.25});
  for (int i = 0; i < 3; ++i) {
    Tensor loss = opt.step([&] {
      opt.zero_grad();
      Tensor l = sum(mul(w, w));
      l.backward();
      return l;
    });
    EXPECT_GT(loss.item(), 0.0);
  }
  // w <- w - 0.25 * 2w = w / 2 per step.
  expect_values(w, {3.0 / 8});
}

TEST(Optimizer, NonContiguousParameterMatchesContiguous) {
  Tensor base = sample_tensor({3, 4}, 7);
  Tensor strided;
  {
    NoGradGuard no_grad;
    strided = base.clone().t();
  }
  strided.set_requires_grad(true);
  ASSERT_FALSE(strided.is_contiguous());
  const auto storage = strided.storage();
  Tensor dense = strided.detach().contiguous();
  dense.set_requires_grad(true);
  RMSprop a({strided}, {.lr = 0.01, .momentum = 0.9, .centered = true});
  RMSprop b({dense}, {.lr = 0.01, .momentum = 0.9, .centered = true});
  for (uint64_t s = 0; s < 5; ++s) {
    Tensor g = sample_tensor({4, 3}, 50 + s);
    strided.set_grad(g);
    dense.set_grad(g);
    a.step();
    b.step();
  }
  EXPECT_EQ(strided.to_vector<double>(), dense.to_vector<double>());
  EXPECT_EQ(strided.storage(), storage);  // updated in place
}

TEST(Optimizer, HalfPrecisionParametersTrain) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor w = sample_param({8}, 3, dt);
    std::vector<double> start = w.to_vector<double>();
    AdamW opt({w}, {.lr = 0.05});
    for (uint64_t s = 0; s < 3; ++s) {
      w.set_grad(sample_tensor({8}, 90 + s).to(dt));
      opt.step();
    }
    EXPECT_EQ(w.dtype(), dt);
    EXPECT_EQ(opt.state(0, 0).tensors.at("exp_avg").dtype(), dt);
    std::vector<double> end = w.to_vector<double>();
    for (size_t i = 0; i < end.size(); ++i) EXPECT_NEAR(end[i], start[i], 0.2);
    EXPECT_NE(end, start);
  }
}

TEST(Optimizer, AdagradCreatesStateForEveryParameterUpFront) {
  Tensor a = param({1.0}), b = param({2.0, 3.0});
  Adagrad opt({a, b}, {.initial_accumulator_value = 0.5});
  expect_values(opt.state(0, 1).tensors.at("sum"), {0.5, 0.5});
  EXPECT_EQ(opt.state(0, 1).step, 0);
  OptimizerState sd = opt.state_dict();
  EXPECT_EQ(sd.tensors.count("state.0.1.sum"), 1u);
  // A group's own value wins over the constructor's (PyTorch would use the constructor's).
  Tensor c = param({4.0});
  opt.add_param_group(ParamGroup{{c}, {{"initial_accumulator_value", 2.0}}});
  expect_values(opt.state(1, 0).tensors.at("sum"), {2.0});
}

TEST(Optimizer, StepChecksEditedGroupsAgain) {
  Tensor w = param({1.0, 2.0});
  Adam opt({w});
  w.set_grad(ones_like(w));
  opt.step();
  opt.param_groups()[0].options["lr"] = -0.5;
  expect_error([&] { opt.step(); }, {"[Adam.step]", "lr >= 0", "-0.5", "test_optimizer.cpp"});
  opt.param_groups()[0].options["lr"] = 0.5;
  Tensor bigger = param({1.0, 2.0, 3.0});
  bigger.set_grad(ones_like(bigger));
  opt.param_groups()[0].params[0] = bigger;
  expect_error([&] { opt.step(); },
               {"[Adam.step]", "parameter 0 of group 0", "float64[2]", "float64[3]"});
  opt.param_groups()[0].params.push_back(w);
  expect_error([&] { opt.step(); }, {"[Adam.step]", "add_param_group"});
}

}  // namespace
}  // namespace kiln::optim
