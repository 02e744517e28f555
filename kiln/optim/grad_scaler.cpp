#include "kiln/optim/grad_scaler.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln::optim {

namespace {
constexpr const char* kOp = "GradScaler";

constexpr double kFloatMax = std::numeric_limits<float>::max();

// The scale is a float32 (PyTorch's is a float32 tensor), so it must fit one.
void check_positive(double v, const char* what, const Loc& loc) {
  if (!(v > 0 && v <= kFloatMax))
    fail(kOp, loc, "{} must be a number > 0 that fits a float32 (<= {:g}), but got {}", what,
         kFloatMax, v);
}

// Whether every element of g is finite: max |g| is finite exactly then (inf and NaN propagate).
bool all_finite(const Tensor& g) {
  if (g.numel() == 0) return true;
  return std::isfinite(max(abs(g)).item<double>());
}
}  // namespace

GradScaler::GradScaler(GradScalerOptions options, const Loc& loc)
    : options_(options), enabled_(options.enabled) {
  check_positive(options.init_scale, "init_scale", loc);
  scale_ = static_cast<float>(options.init_scale);
  if (!(options.growth_factor > 1.0) || !std::isfinite(options.growth_factor))
    fail(kOp, loc, "growth_factor must be a finite number > 1, but got {}", options.growth_factor);
  if (!(options.backoff_factor > 0.0 && options.backoff_factor < 1.0))
    fail(kOp, loc, "backoff_factor must be in (0, 1), but got {}", options.backoff_factor);
  if (options.growth_interval <= 0)
    fail(kOp, loc, "growth_interval must be > 0, but got {}", options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss, const Loc& loc) const {
  if (!enabled_) return loss;
  if (!loss.defined() || !is_floating(loss.dtype()))
    fail(kOp, loc, "scale() expected a floating-point loss, but got {}",
         loss.defined() ? loss.describe() : std::string("an undefined tensor"));
  const Tensor l = loss.dtype() == DType::Float64 ? loss : to_dtype(loss, DType::Float32, loc);
  return mul(l, static_cast<double>(scale_), loc);
}

void GradScaler::unscale_(Optimizer& optimizer, const Loc& loc) {
  if (!enabled_) return;
  PerOptimizer& st = per_optimizer_[&optimizer];
  if (st.stage == Stage::kUnscaled)
    fail(kOp, loc, "unscale_() has already been called on this optimizer since the last update()");
  if (st.stage == Stage::kStepped) fail(kOp, loc, "unscale_() is being called after step()");
  // PyTorch: self._scale.double().reciprocal().float()
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  bool found_inf = false;
  NoGradGuard no_grad;
  for (const ParamGroup& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (g.dtype() == DType::Float16)
        fail(kOp, loc,
             "attempting to unscale float16 gradients ({}): keep the parameters in float32 "
             "(autocast casts them for the low-precision ops)",
             g.describe());
      if (!all_finite(g)) found_inf = true;
      g.mul_(static_cast<double>(inv_scale), loc);
    }
  }
  st.found_inf = found_inf;
  st.stage = Stage::kUnscaled;
}

bool GradScaler::step(Optimizer& optimizer, const Loc& loc) {
  if (!enabled_) {
    optimizer.step(loc);
    return true;
  }
  PerOptimizer& st = per_optimizer_[&optimizer];
  if (st.stage == Stage::kStepped)
    fail(kOp, loc, "step() has already been called since the last update()");
  if (st.stage == Stage::kReady) unscale_(optimizer, loc);
  PerOptimizer& after = per_optimizer_[&optimizer];
  after.stage = Stage::kStepped;
  if (after.found_inf) {
    ++skipped_steps_;
    return false;
  }
  optimizer.step(loc);
  return true;
}

void GradScaler::update(const Loc& loc) {
  if (!enabled_) return;
  if (per_optimizer_.empty())
    fail(kOp, loc,
         "update() found no inf checks: call step() or unscale_() since the last update()");
  bool found_inf = false;
  for (const auto& [opt, st] : per_optimizer_) found_inf = found_inf || st.found_inf;
  // PyTorch's _amp_update_scale_, with a float32 scale.
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    // PyTorch keeps the old scale when the grown one is not finite in float32.
    const double grown = static_cast<double>(scale_) * options_.growth_factor;
    if (grown <= kFloatMax) scale_ = static_cast<float>(grown);
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale, const Loc& loc) {
  if (!enabled_) return;
  check_positive(new_scale, "update()'s new scale", loc);
  scale_ = static_cast<float>(new_scale);
  per_optimizer_.clear();
}

nlohmann::json GradScaler::state_dict() const {
  if (!enabled_) return nlohmann::json::object();
  return {
      {"scale", static_cast<double>(scale_)},      {"growth_factor", options_.growth_factor},
      {"backoff_factor", options_.backoff_factor}, {"growth_interval", options_.growth_interval},
      {"_growth_tracker", growth_tracker_},        {"skipped_steps", skipped_steps_}};
}

void GradScaler::load_state_dict(const nlohmann::json& state, const Loc& loc) {
  if (!enabled_) return;
  if (!state.is_object() || state.empty())
    fail(kOp, loc, "load_state_dict() expected the state of an enabled GradScaler, but got {}",
         state.dump());
  auto number = [&](const char* key) {
    if (!state.contains(key) || !state[key].is_number())
      fail(kOp, loc, "load_state_dict(): '{}' is missing or not a number in {}", key, state.dump());
    return state[key].get<double>();
  };
  GradScalerOptions o = options_;
  o.growth_factor = number("growth_factor");
  o.backoff_factor = number("backoff_factor");
  o.growth_interval = static_cast<int64_t>(number("growth_interval"));
  o.init_scale = number("scale");
  GradScaler check(o, loc);  // the same validation as a constructed one
  const double tracker = number("_growth_tracker");
  if (tracker < 0 || tracker >= static_cast<double>(o.growth_interval))
    fail(kOp, loc, "load_state_dict(): _growth_tracker {} is outside [0, growth_interval {})",
         tracker, o.growth_interval);
  options_ = o;
  scale_ = static_cast<float>(o.init_scale);
  growth_tracker_ = static_cast<int64_t>(tracker);
  skipped_steps_ = state.contains("skipped_steps") ? state["skipped_steps"].get<int64_t>() : 0;
  per_optimizer_.clear();
}

}  // namespace kiln::optim
