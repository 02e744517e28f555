#pragma once
// The optimizers' update ops: their definition is optimizer_update.cpp, their CPU kernels (each
// optimizer's fused loop, Note [optimizer parity]) are in kiln/backend/cpu/optimizer_update_ops.cpp
// (Note [kernel table]), and the optimizer classes (kiln/optim/) dispatch them.
//
// Note [optimizer updates are ops]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An optimizer's step writes every parameter and its state through one op per parameter
// ("sgd_update", "adam_update", "rmsprop_update", "adagrad_update"): inputs (param, grad, state
// tensors...), attrs holding every number the update needs (learning rate, betas, the step count),
// and a declared write of every input but the gradient (Note [effects]). So a mode that sees the
// op stream sees the parameter updates, and a recorded update rebuilt from its attrs does the same
// arithmetic. The kernels are each optimizer's fused loop (Note [optimizer parity]).
#include <nlohmann/json.hpp>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::detail {

enum class OptimizerUpdate { kSgd, kAdam, kRmsprop, kAdagrad };

// Dispatches an update: writes tensors[0] (the parameter) and tensors[2...] in place. tensors[1]
// is the gradient; the state tensors follow in the order the optimizer's kernel reads them.
void optimizer_update(OptimizerUpdate kind, nlohmann::json attrs,
                      const std::vector<Tensor>& tensors, const Loc& loc);

// The attributes an update op holds (not a copy): its kernel reads its numbers from them once per
// call, so a missing one is an error naming it when the update runs.
const nlohmann::json& optimizer_update_attrs(const Op& op);

}  // namespace kiln::detail
