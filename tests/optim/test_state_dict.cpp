// Optimizer snapshots: saving mid-training and loading into a fresh optimizer continues exactly
// like the uninterrupted run; bad snapshots are rejected with the mismatch named.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/optim/adagrad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"
#include "tests/support/test_util.h"

namespace kiln::optim {
namespace {

using test::expect_error;

const std::vector<Shape> kShapes = {{3, 4}, {5}, {2, 2}};

std::vector<Tensor> make_params(DType dtype) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    Tensor p = sample_tensor(kShapes[i], 10 + i).to(dtype);
    p.set_requires_grad(true);
    out.push_back(p);
  }
  return out;
}

std::vector<Tensor> copy_params(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    Tensor c = p.detach().clone();
    c.set_requires_grad(true);
    out.push_back(c);
  }
  return out;
}

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

// Two groups so that group indices in the snapshot matter: {p0, p1} and {p2}.
std::vector<ParamGroup> two_groups(const std::vector<Tensor>& p) {
  return {ParamGroup{{p[0], p[1]}}, ParamGroup{{p[2]}, {{"lr", 0.003}}}};
}

std::vector<std::pair<std::string, Factory>> factories() {
  return {
      {"SGD",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(two_groups(p),
                                      SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
       }},
      {"Adam",
       [](std::vector<Tensor> p) {
         return std::make_unique<Adam>(two_groups(p), AdamOptions{.lr = 0.01, .amsgrad = true});
       }},
      {"AdamW",
       [](std::vector<Tensor> p) {
         return std::make_unique<AdamW>(two_groups(p), AdamWOptions{.lr = 0.01});
       }},
      {"RMSprop",
       [](std::vector<Tensor> p) {
         return std::make_unique<RMSprop>(
             two_groups(p), RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true});
       }},
      {"Adagrad",
       [](std::vector<Tensor> p) {
         return std::make_unique<Adagrad>(two_groups(p), AdagradOptions{.lr_decay = 0.01});
       }},
  };
}

void set_grads(std::vector<Tensor>& params, uint64_t step) {
  for (size_t i = 0; i < params.size(); ++i) {
    // The last parameter misses some gradients, so its step count lags.
    if (i == 2 && step % 3 == 1)
      params[i].set_grad(Tensor());
    else
      params[i].set_grad(sample_tensor(kShapes[i], 500 + 7 * step + i).to(params[i].dtype()));
  }
}

TEST(OptimizerStateDict, ResumedTrainingIsIdenticalToUninterrupted) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    for (const auto& [name, make] : factories()) {
      SCOPED_TRACE(name + std::string(" ") + dtype_name(dt));
      std::vector<Tensor> params = make_params(dt);
      auto opt = make(params);
      auto sched = std::make_unique<StepLR>(*opt, 3, 0.5);
      for (uint64_t s = 0; s < 7; ++s) {
        set_grads(params, s);
        opt->step();
        sched->step();
      }
      OptimizerState snapshot = opt->state_dict();
      nlohmann::json sched_snapshot = sched->state_dict();
      // Round trip the metadata through text, as a checkpoint would.
      snapshot.meta = nlohmann::json::parse(snapshot.meta.dump());

      std::vector<Tensor> resumed = copy_params(params);
      auto opt2 = make(resumed);
      auto sched2 = std::make_unique<StepLR>(*opt2, 3, 0.5);
      opt2->load_state_dict(snapshot);
      sched2->load_state_dict(sched_snapshot);
      EXPECT_EQ(opt2->param_groups()[1].lr(), opt->param_groups()[1].lr());

      for (uint64_t s = 7; s < 15; ++s) {
        set_grads(params, s);
        set_grads(resumed, s);
        opt->step();
        opt2->step();
        sched->step();
        sched2->step();
        EXPECT_EQ(sched->get_last_lr(), sched2->get_last_lr());
      }
      for (size_t i = 0; i < params.size(); ++i)
        EXPECT_EQ(params[i].to_vector<double>(), resumed[i].to_vector<double>()) << "param " << i;
      EXPECT_EQ(opt->state(1, 0).step, opt2->state(1, 0).step);
    }
  }
}

TEST(OptimizerStateDict, SnapshotIsACopy) {
  std::vector<Tensor> params = make_params(DType::Float64);
  Adam opt(params, {.lr = 0.1});
  set_grads(params, 0);
  opt.step();
  OptimizerState sd = opt.state_dict();
  std::vector<double> before = sd.tensors.at("state.0.0.exp_avg").to_vector<double>();
  set_grads(params, 1);
  opt.step();
  EXPECT_EQ(sd.tensors.at("state.0.0.exp_avg").to_vector<double>(), before);
  EXPECT_EQ(sd.meta["state"][0][0]["step"], 1);
  EXPECT_EQ(sd.meta["optimizer"], "Adam");
  EXPECT_EQ(sd.meta["param_groups"][0]["shapes"][0], nlohmann::json({3, 4}));
}

TEST(OptimizerStateDict, LoadingConvertsStateToTheParameterDtype) {
  std::vector<Tensor> p64 = make_params(DType::Float64);
  Adam a(p64, {.lr = 0.1});
  set_grads(p64, 0);
  a.step();
  std::vector<Tensor> p32 = make_params(DType::Float32);
  Adam b(p32, {.lr = 0.1});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.state(0, 0).tensors.at("exp_avg").dtype(), DType::Float32);
  EXPECT_EQ(b.state(0, 0).step, 1);
}

TEST(OptimizerStateDict, MismatchesAreNamed) {
  std::vector<Tensor> params = make_params(DType::Float64);
  Adam opt(params, {.lr = 0.1});
  set_grads(params, 0);
  opt.step();
  const OptimizerState good = opt.state_dict();

  Adam fresh(copy_params(params), {.lr = 0.1});
  auto expect_rejected = [&](const OptimizerState& bad, std::vector<std::string> parts) {
    parts.push_back("[Adam.load_state_dict]");
    parts.push_back("test_state_dict.cpp");
    expect_error([&] { fresh.load_state_dict(bad); }, parts);
    // Nothing changed: the fresh optimizer still has no state.
    EXPECT_FALSE(fresh.state(0, 0).initialized);
    EXPECT_EQ(fresh.param_groups()[0].lr(), 0.1);
  };

  SGD sgd(copy_params(params), {.lr = 0.1});
  expect_error([&] { sgd.load_state_dict(good); },
               {"[SGD.load_state_dict]", "state dict of SGD", "one of Adam"});

  OptimizerState bad = good;
  bad.meta["param_groups"].push_back(bad.meta["param_groups"][0]);
  expect_rejected(bad, {"expected 1 param groups, but got 2"});

  bad = good;
  bad.meta["param_groups"][0]["shapes"].erase(1);
  expect_rejected(bad, {"group 0 to have 3 parameters, but got 2"});

  bad = good;
  bad.meta["param_groups"][0]["shapes"][1] = {6};
  expect_rejected(bad, {"parameter 1 of group 0", "shape [5]", "got [6]"});

  bad = good;
  bad.tensors.erase("state.0.2.exp_avg_sq");
  expect_rejected(bad, {"state tensor 'state.0.2.exp_avg_sq'", "got none"});

  bad = good;
  bad.tensors["state.0.1.exp_avg"] = sample_tensor({4}, 1);
  expect_rejected(bad, {"state.0.1.exp_avg", "float64[5]", "float64[4]"});

  bad = good;
  bad.tensors["state.0.0.momentum"] = sample_tensor({3, 4}, 1);
  expect_rejected(bad, {"unexpected tensor 'state.0.0.momentum'"});

  bad = good;
  bad.meta["param_groups"][0]["options"]["betas"] = {0.9, 2.0};
  expect_rejected(bad, {"betas[1] < 1", "2"});

  bad = good;
  bad.meta["param_groups"][0]["options"]["foo"] = 1;
  expect_rejected(bad, {"unknown option 'foo'"});

  fresh.load_state_dict(good);
  EXPECT_TRUE(fresh.state(0, 0).initialized);
}

}  // namespace
}  // namespace kiln::optim
