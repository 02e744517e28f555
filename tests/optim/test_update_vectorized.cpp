// Note [vectorized updates]: an optimizer's update loop runs whole vectors in its body and the
// remaining elements in a scalar tail. Every element must come out with the bits the scalar path
// gives it, for every combination of flags: the same update of one 1037-element parameter and of
// 1037 one-element parameters (each taking the scalar path) must agree exactly, step after step.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/optim/adagrad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"

namespace kiln::optim {
namespace {

using nlohmann::json;

constexpr int64_t kSize = 1037;  // many vectors of either dtype, and a tail
constexpr int kSteps = 5;

std::unique_ptr<Optimizer> make(const std::string& kind, std::vector<Tensor> params,
                                const json& options) {
  std::vector<ParamGroup> g{ParamGroup{std::move(params), options}};
  if (kind == "SGD") return std::make_unique<SGD>(std::move(g), SGDOptions{});
  if (kind == "Adam") return std::make_unique<Adam>(std::move(g));
  if (kind == "AdamW") return std::make_unique<AdamW>(std::move(g));
  if (kind == "RMSprop") return std::make_unique<RMSprop>(std::move(g));
  return std::make_unique<Adagrad>(std::move(g));
}

TEST(UpdateVectorized, EveryElementGetsTheScalarPathsBits) {
  const std::vector<std::pair<std::string, json>> configs = {
      {"SGD", {{"lr", 0.1}}},
      {"SGD", {{"lr", 0.05}, {"momentum", 0.9}}},
      {"SGD", {{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 0.01}}},
      {"SGD",
       {{"lr", 0.1},
        {"momentum", 0.5},
        {"dampening", 0.3},
        {"weight_decay", 0.1},
        {"maximize", true}}},
      {"Adam", json::object()},
      {"Adam", {{"lr", 0.01}, {"weight_decay", 0.1}}},
      {"Adam",
       {{"lr", 0.02},
        {"betas", {0.8, 0.99}},
        {"eps", 1e-6},
        {"weight_decay", 0.05},
        {"amsgrad", true},
        {"maximize", true}}},
      {"AdamW", {{"lr", 0.01}, {"weight_decay", 0.1}, {"amsgrad", true}}},
      {"AdamW", {{"lr", 0.01}, {"maximize", true}}},
      {"RMSprop", {{"lr", 0.005}, {"weight_decay", 0.01}, {"momentum", 0.5}, {"centered", true}}},
      {"Adagrad", {{"lr", 0.1}, {"lr_decay", 0.01}, {"weight_decay", 0.05}}},
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const auto& [kind, options] : configs) {
      const std::string name = kind + " " + options.dump() + " " + dtype_name(dtype);
      Tensor big = sample_tensor({kSize}, 11, -1.0, 1.0).to(dtype);
      big.set_requires_grad(true);
      std::vector<Tensor> singles;
      {
        NoGradGuard no_grad;
        for (int64_t i = 0; i < kSize; ++i) {
          singles.push_back(clone(narrow(big, 0, i, 1)).detach());
          singles.back().set_requires_grad(true);
        }
      }
      auto vectorized = make(kind, {big}, options);
      auto scalar = make(kind, singles, options);
      for (int s = 0; s < kSteps; ++s) {
        const Tensor g =
            sample_tensor({kSize}, 100 + static_cast<uint64_t>(s), -1.0, 1.0).to(dtype);
        big.set_grad(g);
        {
          NoGradGuard no_grad;
          for (int64_t i = 0; i < kSize; ++i)
            singles[static_cast<size_t>(i)].set_grad(clone(narrow(g, 0, i, 1)));
        }
        vectorized->step();
        scalar->step();
        const std::vector<double> got = big.to_vector<double>();
        int64_t mismatches = 0;
        for (int64_t i = 0; i < kSize; ++i) {
          const double want = singles[static_cast<size_t>(i)].to_vector<double>()[0];
          if (got[static_cast<size_t>(i)] != want && ++mismatches <= 3)
            ADD_FAILURE() << name << " step " << s + 1 << " element " << i << ": "
                          << got[static_cast<size_t>(i)] << " vs " << want;
        }
        EXPECT_EQ(mismatches, 0) << name << " step " << s + 1;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::optim
