#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "kiln/core/tensor.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() returns the loss, step() just steps
};

// Note [grad scaler]
// ~~~~~~~~~~~~~~~~~~
// Dynamic loss scaling for float16 training, torch.cuda.amp.GradScaler's algorithm: float16's
// smallest normal number is 6e-5, so small gradients underflow to zero unless the loss is
// multiplied by a large scale before backward() and the gradients divided by it before the
// optimizer reads them. The scale adapts:
//   scaler.scale(loss).backward();  // loss * scale, in float32
//   scaler.step(optimizer);         // unscale_ (grads *= 1/scale, a float32 reciprocal computed in
//                                   // float64) and, unless a gradient had an inf or NaN, step
//   scaler.update();                // an inf/NaN anywhere: scale *= backoff_factor and the
//                                   // growth count restarts; else after growth_interval clean
//                                   // steps in a row, scale *= growth_factor (if that is finite)
// A skipped step leaves the parameters and the optimizer's state untouched; skipped_steps()
// counts them over the scaler's life. bfloat16 has float32's range and needs no scaling.
// Misuse is an error, as in PyTorch: unscale_ twice, or after step, before update(); step twice
// before update(); update() with no step or unscale_ since the last one; float16 gradients (the
// parameters, the master weights, must be float32).
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {}, const Loc& loc = Loc::current());

  // loss * scale, in float32 (a 16-bit loss is widened first).
  Tensor scale(const Tensor& loss, const Loc& loc = Loc::current()) const;
  // Divides the optimizer's gradients by the scale, in place, and records whether any was not
  // finite. Call it before reading gradients (clipping) between backward and step.
  void unscale_(Optimizer& optimizer, const Loc& loc = Loc::current());
  // unscale_ (if not done) and optimizer.step() unless a gradient was inf or NaN; returns whether
  // it stepped.
  bool step(Optimizer& optimizer, const Loc& loc = Loc::current());
  // Adjusts the scale from this iteration's checks and starts the next iteration.
  void update(const Loc& loc = Loc::current());
  // Sets the scale (and starts the next iteration) instead.
  void update(double new_scale, const Loc& loc = Loc::current());

  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  bool enabled() const { return enabled_; }
  const GradScalerOptions& options() const { return options_; }

  // PyTorch's state_dict keys (scale, growth_factor, backoff_factor, growth_interval,
  // _growth_tracker) plus skipped_steps; {} when disabled, as in PyTorch.
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state, const Loc& loc = Loc::current());

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    bool found_inf = false;
  };
  GradScalerOptions options_;
  bool enabled_;
  float scale_ = 1.0f;  // float32, as PyTorch's scale tensor
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  std::unordered_map<const Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace kiln::optim
