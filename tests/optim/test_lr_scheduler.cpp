#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "kiln/optim/adagrad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/sgd.h"
#include "tests/optim/torch_reference.h"
#include "tests/support/test_util.h"

namespace kiln::optim {
namespace {

using nlohmann::json;

using test::expect_error;

Tensor leaf() {
  Tensor p = zeros({1}, TensorOptions{DType::Float64});
  p.set_requires_grad(true);
  return p;
}

// Two groups with different learning rates.
std::unique_ptr<Optimizer> make_optimizer(const std::string& kind) {
  std::vector<ParamGroup> groups = {ParamGroup{{leaf()}, {{"lr", 0.1}}},
                                    ParamGroup{{leaf()}, {{"lr", 0.05}}}};
  if (kind == "Adam") return std::make_unique<Adam>(groups, AdamOptions{.betas = {0.9, 0.99}});
  return std::make_unique<SGD>(groups, SGDOptions{.momentum = 0.9});
}

double momentum_of(const ParamGroup& g) {
  return g.options.contains("betas") ? g.options["betas"][0].get<double>() : g.number("momentum");
}

struct SchedulerCase {
  std::string name;
  std::string optimizer;
  std::string scheduler;
  json args;
};

std::vector<double> metrics(bool increasing) {
  std::vector<double> out;
  for (int i = 0; i < 30; ++i) {
    double m = 1.0 / (1 + 0.3 * std::min(i, 8)) + 0.002 * ((i * 7) % 5);
    out.push_back(increasing ? 1 - m : m);
  }
  return out;
}

struct Driver {
  std::unique_ptr<LRScheduler> epoch;
  std::unique_ptr<ReduceLROnPlateau> plateau;
};

Driver make_scheduler(Optimizer& opt, const SchedulerCase& c) {
  const json& a = c.args;
  Driver d;
  if (c.scheduler == "StepLR") {
    d.epoch =
        std::make_unique<StepLR>(opt, a["step_size"].get<int64_t>(), a["gamma"].get<double>());
  } else if (c.scheduler == "MultiStepLR") {
    d.epoch = std::make_unique<MultiStepLR>(opt, a["milestones"].get<std::vector<int64_t>>(),
                                            a["gamma"].get<double>());
  } else if (c.scheduler == "ExponentialLR") {
    d.epoch = std::make_unique<ExponentialLR>(opt, a["gamma"].get<double>());
  } else if (c.scheduler == "CosineAnnealingLR") {
    d.epoch = std::make_unique<CosineAnnealingLR>(opt, a["T_max"].get<int64_t>(),
                                                  a.value("eta_min", 0.0));
  } else if (c.scheduler == "LinearLR") {
    d.epoch =
        std::make_unique<LinearLR>(opt, a["start_factor"].get<double>(),
                                   a["end_factor"].get<double>(), a["total_iters"].get<int64_t>());
  } else if (c.scheduler == "OneCycleLR") {
    OneCycleLROptions o;
    o.max_lr = a["max_lr"].is_array() ? a["max_lr"].get<std::vector<double>>()
                                      : std::vector<double>{a["max_lr"].get<double>()};
    o.total_steps = a["total_steps"].get<int64_t>();
    o.pct_start = a.value("pct_start", o.pct_start);
    o.anneal_strategy = a.value("anneal_strategy", o.anneal_strategy);
    o.three_phase = a.value("three_phase", o.three_phase);
    o.div_factor = a.value("div_factor", o.div_factor);
    o.final_div_factor = a.value("final_div_factor", o.final_div_factor);
    o.base_momentum = a.value("base_momentum", o.base_momentum);
    o.max_momentum = a.value("max_momentum", o.max_momentum);
    d.epoch = std::make_unique<OneCycleLR>(opt, o);
  } else {
    ReduceLROnPlateauOptions o;
    o.mode = a.value("mode", o.mode);
    o.factor = a.value("factor", o.factor);
    o.patience = a.value("patience", o.patience);
    o.threshold = a.value("threshold", o.threshold);
    o.threshold_mode = a.value("threshold_mode", o.threshold_mode);
    o.cooldown = a.value("cooldown", o.cooldown);
    if (a.contains("min_lr")) o.min_lr = a["min_lr"].get<std::vector<double>>();
    d.plateau = std::make_unique<ReduceLROnPlateau>(opt, o);
  }
  return d;
}

TEST(LRSchedulerParity, LearningRateSequencesMatchTorch) {
  const std::vector<SchedulerCase> cases = {
      {"step", "SGD", "StepLR", {{"step_size", 7}, {"gamma", 0.5}}},
      {"multistep", "SGD", "MultiStepLR", {{"milestones", {5, 12, 12, 20}}, {"gamma", 0.3}}},
      {"exponential", "SGD", "ExponentialLR", {{"gamma", 0.9}}},
      {"cosine_eta_min", "SGD", "CosineAnnealingLR", {{"T_max", 10}, {"eta_min", 0.001}}},
      {"cosine_7", "Adam", "CosineAnnealingLR", {{"T_max", 7}}},
      {"linear_warmup",
       "SGD",
       "LinearLR",
       {{"start_factor", 0.25}, {"end_factor", 1.0}, {"total_iters", 8}}},
      {"linear_decay",
       "SGD",
       "LinearLR",
       {{"start_factor", 1.0}, {"end_factor", 0.1}, {"total_iters", 12}}},
      {"onecycle_sgd", "SGD", "OneCycleLR", {{"max_lr", {1.0, 0.5}}, {"total_steps", 31}}},
      {"onecycle_adam_three_phase_linear",
       "Adam",
       "OneCycleLR",
       {{"max_lr", 0.01},
        {"total_steps", 40},
        {"pct_start", 0.25},
        {"anneal_strategy", "linear"},
        {"three_phase", true},
        {"div_factor", 10.0},
        {"final_div_factor", 100.0},
        {"base_momentum", 0.8},
        {"max_momentum", 0.9}}},
      {"plateau_min_rel",
       "SGD",
       "ReduceLROnPlateau",
       {{"mode", "min"}, {"factor", 0.5}, {"patience", 2}, {"cooldown", 1}, {"threshold", 0.01}}},
      {"plateau_max_abs",
       "SGD",
       "ReduceLROnPlateau",
       {{"mode", "max"},
        {"factor", 0.3},
        {"patience", 1},
        {"threshold_mode", "abs"},
        {"threshold", 0.05},
        {"min_lr", {0.01, 0.02}}}},
  };
  constexpr int kSteps = 30;
  json requests = json::array();
  std::vector<std::vector<std::vector<double>>> lrs(cases.size()), momenta(cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const SchedulerCase& c = cases[k];
    auto opt = make_optimizer(c.optimizer);
    json group_options = json::array();
    for (const auto& g : opt->param_groups()) group_options.push_back(g.options);
    Driver d = make_scheduler(*opt, c);
    const bool plateau = d.plateau != nullptr;
    const std::vector<double> m = metrics(c.args.value("mode", "min") == "max");
    auto record = [&] {
      std::vector<double> lr, mom;
      for (const auto& g : opt->param_groups()) {
        lr.push_back(g.lr());
        mom.push_back(momentum_of(g));
      }
      EXPECT_EQ(lr, plateau ? d.plateau->get_last_lr() : d.epoch->get_last_lr()) << c.name;
      lrs[k].push_back(lr);
      momenta[k].push_back(mom);
    };
    record();
    for (int s = 0; s < kSteps; ++s) {
      opt->step();
      if (plateau)
        d.plateau->step(m[s]);
      else
        d.epoch->step();
      record();
    }
    json req = {{"kind", "scheduler"},      {"name", c.name},
                {"optimizer", c.optimizer}, {"group_options", group_options},
                {"scheduler", c.scheduler}, {"args", c.args},
                {"steps", kSteps}};
    if (plateau) req["metrics"] = m;
    requests.push_back(req);
  }
  json results = testing::run_torch_reference(requests, "schedulers");
  ASSERT_FALSE(results.is_null());
  ASSERT_EQ(results.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const json& r = results[k];
    ASSERT_EQ(r["lrs"].size(), lrs[k].size()) << cases[k].name;
    double worst = 0;
    bool changed = false;
    for (size_t s = 0; s < lrs[k].size(); ++s) {
      double e1 = testing::max_scaled_error(lrs[k][s], r["lrs"][s].get<std::vector<double>>());
      double e2 =
          testing::max_scaled_error(momenta[k][s], r["momenta"][s].get<std::vector<double>>());
      EXPECT_LE(e1, 1e-12) << cases[k].name << " lr after step " << s;
      EXPECT_LE(e2, 1e-12) << cases[k].name << " momentum after step " << s;
      worst = std::max({worst, e1, e2});
      changed = changed || lrs[k][s] != lrs[k][0];
    }
    EXPECT_TRUE(changed) << cases[k].name << ": the schedule never changed the lr";
    std::printf("[ parity ] %-40s max scaled error %.3g\n", cases[k].name.c_str(), worst);
  }
}

TEST(LRScheduler, StepLRByHand) {
  Tensor w = leaf();
  SGD opt({w}, {.lr = 1.0});
  StepLR sched(opt, 2, 0.1);
  std::vector<double> seen = {sched.get_last_lr()[0]};
  for (int i = 0; i < 4; ++i) {
    sched.step();
    seen.push_back(sched.get_last_lr()[0]);
  }
  EXPECT_EQ(seen[0], 1.0);
  EXPECT_EQ(seen[1], 1.0);
  EXPECT_NEAR(seen[2], 0.1, 1e-15);
  EXPECT_NEAR(seen[3], 0.1, 1e-15);
  EXPECT_NEAR(seen[4], 0.01, 1e-15);
  EXPECT_EQ(opt.param_groups()[0].number("initial_lr"), 1.0);
  EXPECT_EQ(sched.last_epoch(), 4);
}

TEST(LRScheduler, StateDictResumesTheSequence) {
  auto opt = make_optimizer("SGD");
  CosineAnnealingLR sched(*opt, 6, 0.01);
  for (int i = 0; i < 4; ++i) sched.step();
  json sd = json::parse(sched.state_dict().dump());
  auto opt_sd = opt->state_dict();

  auto opt2 = make_optimizer("SGD");
  CosineAnnealingLR sched2(*opt2, 6, 0.01);
  opt2->load_state_dict(opt_sd);
  sched2.load_state_dict(sd);
  for (int i = 0; i < 10; ++i) {
    sched.step();
    sched2.step();
    EXPECT_EQ(sched.get_last_lr(), sched2.get_last_lr());
  }
  StepLR other(*opt2, 3);
  expect_error([&] { other.load_state_dict(sd); },
               {"[StepLR.load_state_dict]", "state dict of StepLR", "CosineAnnealingLR"});
}

TEST(LRScheduler, PlateauStateDictKeepsInfiniteBest) {
  auto opt = make_optimizer("SGD");
  ReduceLROnPlateau sched(*opt, {.patience = 0});
  json sd = json::parse(sched.state_dict().dump());  // best is +inf before any step
  ReduceLROnPlateau again(*opt, {.patience = 0});
  again.load_state_dict(sd);
  EXPECT_TRUE(std::isinf(again.best()));
  again.step(1.0);
  again.step(2.0);  // worse: patience 0 reduces at once
  EXPECT_NEAR(again.get_last_lr()[0], 0.01, 1e-15);
  EXPECT_EQ(again.best(), 1.0);
}

TEST(LRScheduler, ErrorsNameTheSchedulerAndTheCall) {
  auto opt = make_optimizer("SGD");
  expect_error([&] { LinearLR(*opt, 0.0); },
               {"[LinearLR]", "0 < start_factor <= 1", "test_lr_scheduler.cpp"});
  expect_error([&] { StepLR(*opt, 0); }, {"[StepLR]", "step_size >= 1"});
  expect_error([&] { ReduceLROnPlateau(*opt, {.factor = 1.0}); },
               {"[ReduceLROnPlateau]", "factor < 1"});
  expect_error(
      [&] {
        ReduceLROnPlateau(*opt, {.min_lr = {0.1, 0.2, 0.3}});
      },
      {"[ReduceLROnPlateau]", "one per param group (2)", "3 values"});
  expect_error([&] { OneCycleLR(*opt, {.max_lr = {0.1}}); }, {"[OneCycleLR]", "total_steps"});
  expect_error([&] { StepLR(*make_optimizer("SGD"), 3, 0.1, 5); },
               {"[StepLR]", "initial_lr", "last_epoch = 5"});

  Tensor w = leaf();
  Adagrad adagrad({w});
  expect_error([&] { OneCycleLR(adagrad, {.max_lr = {0.1}, .total_steps = 10}); },
               {"[OneCycleLR]", "cycle_momentum", "Adagrad"});

  auto opt2 = make_optimizer("SGD");
  OneCycleLR one(*opt2, {.max_lr = {0.1}, .total_steps = 3});
  one.step();
  one.step();
  one.step();  // last_epoch 3 == total_steps is still allowed, as in PyTorch
  expect_error([&] { one.step(); }, {"[OneCycleLR]", "total_steps = 3", "step 5"});

  auto opt3 = make_optimizer("SGD");
  ExponentialLR exp(*opt3, 0.5);
  opt3->add_param_group(ParamGroup{{leaf()}, {{"lr", 1.0}}});
  expect_error([&] { exp.step(); }, {"[ExponentialLR]", "2 param groups", "got 3"});
}

}  // namespace
}  // namespace kiln::optim
