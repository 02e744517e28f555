#pragma once
// A training step compiled into one graph: forward, loss and every parameter's gradient.
#include <memory>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/graph/function.h"
#include "kiln/nn/module.h"
#include "kiln/ops/autocast.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {
class GradScaler;
}  // namespace kiln::optim

namespace kiln::train {

using StepLossFn = std::function<Tensor(const Tensor& logits, const Tensor& target)>;

// Note [compiled training step]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// compile_train_step(model, loss, optimizer) is Keras' jit_compile for one step: the first call
// traces model(data), loss(logits, target) plus the model's regularization terms, kiln::grad of
// that loss with respect to every parameter that requires grad (Note [traced gradients]) and the
// optimizer's update of every parameter into one graph, with the batch dim symbolic (Note
// [symbolic dims]), so one compile serves every batch size, the last short batch of an epoch
// included. The graph goes through the optimizer's passes (Note [graph passes]; no freeze: the
// parameters change every step) and runs without recording a tape, on planned memory (Note
// [memory planner]): its gradients are its own nodes, each released as soon as its update has
// read it, and the forward's activations as soon as the backward has.
// The updates are the optimizer's own: each call first runs optimizer.step() with its updates
// collected instead of run (Note [updates in graphs]), so step counts, lazily made state,
// learning-rate schedules and option checks behave exactly as in eager training, and the numbers
// each update needs this step (lr, step count, ...) enter the graph as its third input. A call
// whose updates write other tensors (a load_state_dict that replaced the optimizer's state)
// traces again. A compiled step leaves .grad empty: the gradients live and die in the graph.
// Batch-norm statistics, counters and dropout masks are graph effects (Note [effects]): a
// compiled step trains exactly as the eager step does (tests/train).
// The model's train/eval mode is part of the cache key (Note [traced modules]). A model whose
// forward bakes the batch size into an op fails the symbolic trace; the step then traces per
// batch shape instead, and says so once through the logger.
struct CompiledStepOptions {
  std::string name = "train_step";
  graph::OptimizeOptions passes = {};
  // Where the fallback notice and retraces are reported (stderr when empty).
  std::function<void(const std::string&)> logger = nullptr;
  // Intermediates on a planned arena (Note [memory planner]); false: the caching allocator.
  bool plan_memory = true;
  // Note [autocast in compiled steps]: the forward and the loss are traced inside
  // autocast(*autocast_dtype, autocast_options), so the graph holds the casts the region makes:
  // each parameter is cast once per graph (the region's cast cache lives for the trace), the
  // gradients flow back through the casts to float32 parameters, and nothing is cast again at
  // run time beyond what the graph says. float16 needs grad_scaler (an Error without one).
  std::optional<DType> autocast_dtype = std::nullopt;
  AutocastOptions autocast_options = {};
  // Note [loss scaling in compiled steps]: with a scaler (float16's dynamic loss scaling), the
  // graph computes the forward, the loss and the gradients of loss * scale, the scale being a
  // graph input (a new scale does not retrace); the gradients come out of the graph and the
  // scaler's unscale_, inf/NaN check, step-or-skip and update run on them as in an eager float16
  // step, so a compiled step skips, backs off and grows exactly as an eager one. Skipping is a
  // decision the host makes (it reads the check), so the optimizer's updates run eagerly here,
  // not as graph nodes. The scaler must outlive the step.
  optim::GradScaler* grad_scaler = nullptr;
};

class CompiledStep {
 public:
  CompiledStep(nn::Module& model, StepLossFn loss, optim::Optimizer& optimizer,
               CompiledStepOptions options = {});

  struct Result {
    Tensor loss;    // the batch's loss (regularization included), detached
    Tensor logits;  // the model's output, detached (for metrics)
  };
  // One step on a batch: forward, gradients and the optimizer's updates, in one graph.
  Result operator()(const Tensor& data, const Tensor& target, const Loc& loc = Loc::current());

  // The compiled function (nullptr before the first call).
  const graph::Function* function() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

CompiledStep compile_train_step(nn::Module& model, StepLossFn loss, optim::Optimizer& optimizer,
                                CompiledStepOptions options = {});

}  // namespace kiln::train
