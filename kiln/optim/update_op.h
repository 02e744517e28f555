#pragma once
// Note [optimizer updates are ops]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An optimizer's step writes every parameter and its state through one op per parameter
// ("sgd_update", "adam_update", "rmsprop_update", "adagrad_update"): inputs (param, grad, state
// tensors...), attrs holding every number the update needs (learning rate, betas, the step count),
// and a declared write of every input but the gradient (Note [effects]). So a mode that sees the
// op stream sees the parameter updates, and a recorded update rebuilt from its attrs does the same
// arithmetic. The kernels are each optimizer's fused loop (Note [optimizer parity]).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op_factory.h"

namespace kiln::optim::detail {

// The loop of one update: t[0] is the parameter's contiguous memory, t[1] the contiguous gradient
// of its dtype, t[2...] the contiguous state tensors, in the order the optimizer passes them.
using UpdateKernel = void (*)(const Attrs& attrs, const std::vector<Tensor>& t);

// Registers an update op under `name` (at load time, beside the optimizer).
bool register_update_op(const char* name, UpdateKernel kernel);

// Dispatches an update: writes tensors[0] (the parameter) and tensors[2...] in place.
void run_update(const char* name, nlohmann::json attrs, const std::vector<Tensor>& tensors,
                const Loc& loc);

}  // namespace kiln::optim::detail
