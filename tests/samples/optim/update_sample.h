#pragma once
// The registry sample shape shared by the optimizers' update ops (Note [optimizer updates are
// ops] in kiln/ops/optimizer_update.h).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/optim/optimizer.h"
#include "tests/samples/registry.h"

namespace kiln::optim::detail {

// A registry sample for an update op: three steps of the optimizer `make` builds for a copy of
// inputs[0], with gradient inputs[1] (scaled by the step number); returns the parameter.
OpSample update_sample(std::string label,
                       std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)> make);

}  // namespace kiln::optim::detail
