#pragma once
#include <optional>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// torch.optim.SGD. lr has no default (as in PyTorch): give it here or in every group.
struct SGDOptions {
  std::optional<double> lr = std::nullopt;  // required
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  bool maximize = false;
};

// Stochastic gradient descent with optional (Nesterov) momentum, PyTorch's formulation:
//   g = grad + weight_decay * p
//   buf = g (first step), else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// State per parameter: "momentum_buffer" (only when momentum != 0).
class SGD final : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options, const Loc& loc = Loc::current());
  SGD(std::vector<ParamGroup> groups, SGDOptions options, const Loc& loc = Loc::current());
  const char* name() const override { return "SGD"; }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override;
  void validate(const nlohmann::json& options, const std::string& op,
                const Loc& loc) const override;
};

}  // namespace kiln::optim
