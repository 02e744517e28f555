#pragma once
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
};

// torch.optim.RMSprop:
//   v = alpha * v + (1 - alpha) * g * g
//   avg = sqrt(v - g_avg^2) + eps with centered (g_avg = alpha * g_avg + (1 - alpha) * g), else
//         sqrt(v) + eps
//   momentum > 0: buf = momentum * buf + g / avg, p -= lr * buf;  else p -= lr * g / avg
// State per parameter: "square_avg", "momentum_buffer" (momentum > 0), "grad_avg" (centered).
class RMSprop final : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {}, const Loc& loc = Loc::current());
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options = {},
          const Loc& loc = Loc::current());
  const char* name() const override { return "RMSprop"; }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override;
  void validate(const nlohmann::json& options, const std::string& op,
                const Loc& loc) const override;
};

}  // namespace kiln::optim
