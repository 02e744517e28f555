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
//
// Note [updates in graphs]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A compiled training step (Note [compiled training step]) runs the updates inside its graph. An
// update node must then take the numbers that change from step to step (the learning rate a
// schedule sets, the step count, SGD's first step) as data, not as attributes baked at trace
// time: with the attr "hyper_row": r, input 2 is a float64 matrix whose row r holds the update's
// numbers (every attr that is a number or a bool, in the attrs' key order; update_hyper_values)
// and the kernel reads them there (resolved_update_attrs), so one graph serves every step. The
// step collects what the optimizer's own step() would dispatch (UpdateSink) to build that matrix
// each call, so the optimizer logic (state creation, step counts, option checks) runs as in eager.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
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

// The attrs the update's loop runs with and the tensors it runs on: the op's own attrs and
// inputs, or, for an op with "hyper_row" (Note [updates in graphs]), a copy of the attrs in
// `storage` with the row's numbers and the inputs without the matrix.
const nlohmann::json& resolved_update_attrs(const Op& op, const std::vector<Tensor>& inputs,
                                            std::vector<Tensor>& loop_inputs,
                                            nlohmann::json& storage);
// An update's numbers, in the order a hyper row holds them, and whether attr `key` is one.
std::vector<double> update_hyper_values(const nlohmann::json& attrs);
bool is_update_hyper(const std::string& key, const nlohmann::json& value);

// Dispatches an update whose numbers come from row `row` of `hyper` (float64 [rows, columns]).
void optimizer_update_from(OptimizerUpdate kind, nlohmann::json attrs, std::vector<Tensor> tensors,
                           const Tensor& hyper, int64_t row, const Loc& loc);

// Takes the updates an optimizer's step dispatches on this thread, instead of running them.
class UpdateSink {
 public:
  virtual ~UpdateSink() = default;
  virtual void take(OptimizerUpdate kind, nlohmann::json attrs,
                    const std::vector<Tensor>& tensors) = 0;
};
// Makes `sink` take this thread's updates for the scope's lifetime.
class UpdateSinkScope {
 public:
  explicit UpdateSinkScope(UpdateSink* sink);
  ~UpdateSinkScope();
  UpdateSinkScope(const UpdateSinkScope&) = delete;
  UpdateSinkScope& operator=(const UpdateSinkScope&) = delete;

 private:
  UpdateSink* previous_;
};

}  // namespace kiln::detail
