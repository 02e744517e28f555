// GradScaler (Note [grad scaler]): PyTorch's algorithm on planted overflows (live parity with
// torch.cuda.amp.GradScaler's own code, tests/optim/torch_grad_scaler_reference.py), its misuse
// errors, and its state.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/grad_scaler.h"
#include "tests/support/source_file.h"
#include "tests/support/torch_runner.h"

namespace kiln::optim {
namespace {

using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

struct ScalerCase {
  std::vector<double> params;
  std::vector<std::vector<double>> grads;
  double lr;
  GradScalerOptions options;
};

json options_json(const GradScalerOptions& o) {
  return {{"init_scale", o.init_scale},
          {"growth_factor", o.growth_factor},
          {"backoff_factor", o.backoff_factor},
          {"growth_interval", o.growth_interval}};
}

// One step as a training loop does it: backward of the scaled loss sum(p * g), step, update.
bool train_step(GradScaler& scaler, SGD& opt, const Tensor& p, const std::vector<double>& g) {
  opt.zero_grad();
  scaler.scale(sum(mul(p, tensor(g, std::nullopt, {DType::Float32})))).backward();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

TEST(GradScalerParity, PlantedOverflowsGiveTorchsScalesSkipsAndParameters) {
  std::vector<ScalerCase> cases;
  cases.push_back({{1, 2, 3},
                   {{1, 1, 1}, {kInf, 1, 1}, {0.5, 0.25, 1}, {1, 2, 3}, {kNan, 0, 0}, {1e-3, 1, 2}},
                   0.1,
                   {.init_scale = 1024, .growth_interval = 2}});
  // Growth to float32's limit: the grown scale would be inf and is not taken.
  cases.push_back({{0.5, -0.5},
                   {{1, 1}, {1, 1}, {1, 1}, {-kInf, 1}, {2, 2}, {2, 2}},
                   0.01,
                   {.init_scale = 0x1p126, .growth_factor = 4.0, .growth_interval = 1}});
  // Gradients that overflow only once scaled: 1e36 * 2^16 is inf in float32.
  cases.push_back({{1, 1},
                   {{1e36, 1}, {1e30, 1}, {1, 1}, {1, 1}, {1, 1}},
                   0.5,
                   {.init_scale = 65536, .backoff_factor = 0.25, .growth_interval = 3}});
  json request = json::array();
  for (const ScalerCase& c : cases) {
    json grads = json::array();
    for (const auto& g : c.grads) grads.push_back(test::encode_values(g));
    request.push_back({{"params", c.params},
                       {"grads", grads},
                       {"lr", c.lr},
                       {"options", options_json(c.options)}});
  }
  const json ref = test::run_torch_cases(
      test::source_file("tests/optim/torch_grad_scaler_reference.py"), request, "grad_scaler");
  ASSERT_FALSE(ref.is_null());
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const ScalerCase& c = cases[k];
    Tensor p = tensor(c.params, std::nullopt, {DType::Float32});
    p.set_requires_grad(true);
    SGD opt({p}, {.lr = c.lr});
    GradScaler scaler(c.options);
    int64_t skipped = 0;
    for (size_t s = 0; s < c.grads.size(); ++s) {
      const json& want = ref[k]["steps"][s];
      const bool stepped = train_step(scaler, opt, p, c.grads[s]);
      skipped += stepped ? 0 : 1;
      const std::string at = "case " + std::to_string(k) + " step " + std::to_string(s);
      EXPECT_EQ(stepped, want["stepped"].get<bool>()) << at;
      EXPECT_EQ(scaler.get_scale(), want["scale"].get<double>()) << at;
      EXPECT_EQ(scaler.growth_tracker(), want["growth_tracker"].get<int64_t>()) << at;
      const std::vector<double> got = p.to_vector<double>();
      const std::vector<double> want_p = want["params"].get<std::vector<double>>();
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want_p[i]) << at << " param " << i;
    }
    EXPECT_EQ(scaler.skipped_steps(), skipped);
    json state = scaler.state_dict();
    const json& torch_state = ref[k]["state_dict"];
    for (const char* key :
         {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
      EXPECT_EQ(state[key].get<double>(), torch_state[key].get<double>()) << key;
  }
}

TEST(GradScaler, MisuseIsAnErrorAsInPyTorch) {
  Tensor p = tensor({1.0, 2.0});
  p.set_requires_grad(true);
  SGD opt({p}, {.lr = 0.1});
  GradScaler scaler;
  EXPECT_THROW(scaler.update(), Error) << "update() before any step";
  scaler.scale(sum(p)).backward();
  scaler.unscale_(opt);
  EXPECT_THROW(scaler.unscale_(opt), Error) << "unscale_ twice";
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_THROW(scaler.step(opt), Error) << "step twice";
  EXPECT_THROW(scaler.unscale_(opt), Error) << "unscale_ after step";
  scaler.update();
  EXPECT_THROW(GradScaler({.growth_factor = 1.0}), Error);
  EXPECT_THROW(GradScaler({.backoff_factor = 1.5}), Error);
  EXPECT_THROW(GradScaler({.growth_interval = 0}), Error);
  EXPECT_THROW(GradScaler({.init_scale = -1}), Error);
  EXPECT_THROW(GradScaler({.init_scale = 1e300}), Error) << "the scale is a float32";

  Tensor h = tensor({1.0, 2.0}).to(DType::Float16);
  h.set_requires_grad(true);
  SGD half_opt({h}, {.lr = 0.1});
  GradScaler half_scaler;
  half_scaler.scale(sum(h)).backward();
  try {
    half_scaler.unscale_(half_opt);
    ADD_FAILURE() << "float16 gradients were unscaled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float16 gradients"), std::string::npos) << e.what();
  }
}

TEST(GradScaler, StateRoundTripsAndBadStateIsRefused) {
  Tensor p = tensor({1.0});
  p.set_requires_grad(true);
  SGD opt({p}, {.lr = 0.1});
  GradScaler a({.init_scale = 256, .growth_interval = 5});
  train_step(a, opt, p, {kInf});
  train_step(a, opt, p, {1.0});
  train_step(a, opt, p, {1.0});
  GradScaler b;
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.get_scale(), 128.0);
  EXPECT_EQ(b.growth_tracker(), 2);
  EXPECT_EQ(b.skipped_steps(), 1);
  EXPECT_EQ(b.options().growth_interval, 5);
  json bad = a.state_dict();
  bad["_growth_tracker"] = 7;
  EXPECT_THROW(b.load_state_dict(bad), Error);
  bad = a.state_dict();
  bad.erase("scale");
  EXPECT_THROW(b.load_state_dict(bad), Error);
  EXPECT_THROW(b.load_state_dict(json::object()), Error);

  GradScaler off({.enabled = false});
  EXPECT_TRUE(off.state_dict().empty());
  Tensor loss = sum(p);
  EXPECT_TRUE(off.scale(loss).is_same(loss));
  EXPECT_EQ(off.get_scale(), 1.0);
}

}  // namespace
}  // namespace kiln::optim
