#pragma once
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};

// torch.optim.Adagrad:
//   clr = lr / (1 + (t - 1) * lr_decay),  sum += g * g,  p -= clr * g / (sqrt(sum) + eps)
// State per parameter: the step count t and "sum", created for every parameter when it joins
// (filled with initial_accumulator_value), as PyTorch does. Unlike PyTorch, which fills every
// group's accumulators with the constructor's value, a group's own initial_accumulator_value is
// used.
class Adagrad final : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions options = {}, const Loc& loc = Loc::current());
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options = {},
          const Loc& loc = Loc::current());
  const char* name() const override { return "Adagrad"; }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override;
  void validate(const nlohmann::json& options, const std::string& op,
                const Loc& loc) const override;
  void init_state(const ParamGroup& group, const Tensor& param, ParamState& state) override;
};

}  // namespace kiln::optim
