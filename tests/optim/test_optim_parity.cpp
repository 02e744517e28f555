// Live parity with torch.optim: the same initial parameters and 20 gradients go through kiln's
// and PyTorch's optimizers (tests/optim/torch_optim_reference.py), and every parameter must agree
// after every step within 1e-6 relative (scale max(1, |x|)) in float64 and float32.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/optim/adagrad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"
#include "tests/optim/torch_reference.h"

namespace kiln::optim {
namespace {

using nlohmann::json;
using testing::decode_values;
using testing::encode_values;
using testing::max_scaled_error;

constexpr int kSteps = 20;
constexpr double kTolerance = 1e-6;

// Shapes of the parameters; the third gets no gradient every fourth step (skipped, with its
// state and step count left alone), the last is zero-dim.
const std::vector<Shape> kShapes = {{3, 4}, {5}, {2, 3, 2}, {}};

struct Config {
  std::string name;
  std::string optimizer;
  std::vector<json> groups;  // options per group; with two groups: params {0, 2} and {1, 3}
};

std::vector<Config> configs() {
  return {
      {"sgd_plain", "SGD", {{{"lr", 0.1}}}},
      {"sgd_momentum", "SGD", {{{"lr", 0.05}, {"momentum", 0.9}}}},
      {"sgd_nesterov_wd",
       "SGD",
       {{{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 0.01}}}},
      {"sgd_dampening_maximize",
       "SGD",
       {{{"lr", 0.1},
         {"momentum", 0.5},
         {"dampening", 0.3},
         {"weight_decay", 0.1},
         {"maximize", true}}}},
      {"sgd_two_groups",
       "SGD",
       {{{"lr", 0.1}, {"momentum", 0.9}}, {{"lr", 0.01}, {"weight_decay", 0.05}}}},
      {"adam_default", "Adam", {json::object()}},
      {"adam_lr_wd", "Adam", {{{"lr", 0.01}, {"weight_decay", 0.1}}}},
      {"adam_amsgrad", "Adam", {{{"lr", 0.01}, {"amsgrad", true}}}},
      {"adam_all",
       "Adam",
       {{{"lr", 0.02},
         {"betas", {0.8, 0.99}},
         {"eps", 1e-6},
         {"weight_decay", 0.05},
         {"amsgrad", true},
         {"maximize", true}}}},
      {"adam_two_groups",
       "Adam",
       {{{"lr", 0.01}}, {{"lr", 0.003}, {"betas", {0.5, 0.9}}, {"amsgrad", true}}}},
      {"adamw_default", "AdamW", {{{"lr", 0.01}}}},
      {"adamw_wd_amsgrad", "AdamW", {{{"lr", 0.01}, {"weight_decay", 0.1}, {"amsgrad", true}}}},
      {"rmsprop_default", "RMSprop", {json::object()}},
      {"rmsprop_momentum", "RMSprop", {{{"lr", 0.01}, {"momentum", 0.9}}}},
      {"rmsprop_centered", "RMSprop", {{{"lr", 0.01}, {"centered", true}}}},
      {"rmsprop_all",
       "RMSprop",
       {{{"lr", 0.005},
         {"alpha", 0.9},
         {"eps", 1e-6},
         {"weight_decay", 0.01},
         {"momentum", 0.5},
         {"centered", true},
         {"maximize", true}}}},
      {"adagrad_default", "Adagrad", {{{"lr", 0.1}}}},
      {"adagrad_all",
       "Adagrad",
       {{{"lr", 0.1},
         {"lr_decay", 0.01},
         {"weight_decay", 0.05},
         {"initial_accumulator_value", 0.1},
         {"eps", 1e-8}}}},
  };
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& kind, std::vector<ParamGroup> g) {
  if (kind == "SGD") return std::make_unique<SGD>(std::move(g), SGDOptions{});
  if (kind == "Adam") return std::make_unique<Adam>(std::move(g));
  if (kind == "AdamW") return std::make_unique<AdamW>(std::move(g));
  if (kind == "RMSprop") return std::make_unique<RMSprop>(std::move(g));
  if (kind == "Adagrad") return std::make_unique<Adagrad>(std::move(g));
  throw std::runtime_error("unknown optimizer " + kind);
}

std::vector<std::vector<size_t>> group_members(size_t groups) {
  if (groups == 1) return {{0, 1, 2, 3}};
  return {{0, 2}, {1, 3}};
}

Tensor gradient(size_t step, size_t param, DType dtype) {
  return sample_tensor(kShapes[param], 1000 + 17 * step + param, -1.0, 1.0).to(dtype);
}
bool has_gradient(size_t step, size_t param) {
  return !(param == 2 && step % 4 == 3);
}

struct KilnRun {
  json request;                                           // the case for the PyTorch script
  std::vector<std::vector<std::vector<double>>> history;  // [step][param] values
};

KilnRun run_kiln(const Config& config, DType dtype) {
  std::vector<Tensor> params;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    Tensor p = sample_tensor(kShapes[i], 100 + i, -1.0, 1.0).to(dtype);
    p.set_requires_grad(true);
    params.push_back(p);
  }
  KilnRun run;
  json& req = run.request;
  req["kind"] = "optimizer";
  req["name"] = config.name + "/" + dtype_name(dtype);
  req["optimizer"] = config.optimizer;
  req["dtype"] = dtype_name(dtype);
  for (const Tensor& p : params) req["params"].push_back(testing::tensor_json(p));

  const auto members = group_members(config.groups.size());
  std::vector<ParamGroup> groups;
  for (size_t g = 0; g < members.size(); ++g) {
    ParamGroup group{{}, config.groups[g]};
    for (size_t i : members[g]) group.params.push_back(params[i]);
    groups.push_back(group);
  }
  auto opt = make_optimizer(config.optimizer, groups);
  for (size_t g = 0; g < members.size(); ++g)
    req["groups"].push_back({{"params", members[g]}, {"options", opt->param_groups()[g].options}});

  for (size_t s = 0; s < kSteps; ++s) {
    json step_grads = json::array();
    for (size_t i = 0; i < params.size(); ++i) {
      if (has_gradient(s, i)) {
        Tensor g = gradient(s, i, dtype);
        params[i].set_grad(g);
        step_grads.push_back(encode_values(g.to_vector<double>()));
      } else {
        params[i].set_grad(Tensor());
        step_grads.push_back(nullptr);
      }
    }
    req["grads"].push_back(step_grads);
    opt->step();
    std::vector<std::vector<double>> values;
    for (const Tensor& p : params) values.push_back(p.to_vector<double>());
    run.history.push_back(values);
  }
  return run;
}

TEST(OptimParity, EveryOptimizerMatchesTorchStepByStep) {
  std::vector<KilnRun> runs;
  json cases = json::array();
  for (const Config& c : configs()) {
    for (DType dt : {DType::Float64, DType::Float32}) {
      runs.push_back(run_kiln(c, dt));
      cases.push_back(runs.back().request);
    }
  }
  json results = testing::run_torch_reference(cases, "optimizers");
  ASSERT_FALSE(results.is_null());
  ASSERT_EQ(results.size(), runs.size());
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::string name = runs[r].request["name"];
    const json& torch_history = results[r]["params"];
    ASSERT_EQ(results[r]["name"], name);
    ASSERT_EQ(torch_history.size(), static_cast<size_t>(kSteps)) << name;
    double worst = 0;
    for (size_t s = 0; s < kSteps; ++s) {
      for (size_t i = 0; i < kShapes.size(); ++i) {
        double err = max_scaled_error(runs[r].history[s][i], decode_values(torch_history[s][i]));
        EXPECT_LE(err, kTolerance) << name << ": parameter " << i << " after step " << s + 1;
        worst = std::max(worst, err);
      }
    }
    // Also make sure the parameters moved (a no-op optimizer must not pass).
    double moved = max_scaled_error(runs[r].history.back()[0],
                                    decode_values(runs[r].request["params"][0]["values"]));
    EXPECT_GT(moved, 1e-4) << name;
    std::printf("[ parity ] %-40s max scaled error %.3g\n", name.c_str(), worst);
  }
}

}  // namespace
}  // namespace kiln::optim
