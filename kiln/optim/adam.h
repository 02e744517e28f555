#pragma once
#include <array>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
};

// AdamW's defaults differ from Adam's only in weight_decay (1e-2, as in PyTorch).
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

// torch.optim.Adam: L2 weight decay is added to the gradient, then
//   m = beta1 * m + (1 - beta1) * g,  v = beta2 * v + (1 - beta2) * g * g  (v_max = max(v_max, v)
//   with amsgrad), denom = sqrt(v) / sqrt(1 - beta2^t) + eps,  p -= lr / (1 - beta1^t) * m / denom.
// Note the eps placement: it is added after the bias correction of sqrt(v), as PyTorch does.
// State per parameter: the step count t, "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {}, const Loc& loc = Loc::current());
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {}, const Loc& loc = Loc::current());
  const char* name() const override { return "Adam"; }

 protected:
  Adam(nlohmann::json defaults) : Optimizer(std::move(defaults)) {}
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override;
  void validate(const nlohmann::json& options, const std::string& op,
                const Loc& loc) const override;
  // AdamW decays the parameter itself (p *= 1 - lr * weight_decay) instead of the gradient.
  virtual bool decoupled_weight_decay() const { return false; }
};

// torch.optim.AdamW: Adam with decoupled weight decay, p *= 1 - lr * weight_decay before the
// Adam update (Loshchilov & Hutter).
class AdamW final : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {}, const Loc& loc = Loc::current());
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {}, const Loc& loc = Loc::current());
  const char* name() const override { return "AdamW"; }

 protected:
  bool decoupled_weight_decay() const override { return true; }
};

}  // namespace kiln::optim
