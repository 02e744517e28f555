#pragma once
#include <functional>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln {

// Runs an op: checks devices, runs infer, runs the kernel (not on meta), checks for anomalies when
// anomaly mode is on, and hands the call to the tape recorder when gradients are being recorded.
std::vector<Tensor> dispatch(const OpPtr& op, const std::vector<Tensor>& inputs, const Loc& loc);
Tensor dispatch1(const OpPtr& op, const std::vector<Tensor>& inputs, const Loc& loc);

template <class O, class... Args>
Tensor call_op(const std::vector<Tensor>& inputs, const Loc& loc, Args&&... attrs) {
  return dispatch1(std::make_shared<const O>(std::forward<Args>(attrs)...), inputs, loc);
}

// Note [tape recorder]: the autograd layer sits above ops, yet every op must record itself on the
// tape. Autograd installs this hook at load time instead of ops including autograd.
using TapeRecorder = void (*)(const OpPtr& op, const std::vector<Tensor>& inputs,
                              std::vector<Tensor>& outputs, const Loc& loc);
void set_tape_recorder(TapeRecorder recorder);
// Whether any input requires grad and grad mode is on (the dispatcher's own test).
bool should_record(const Op& op, const std::vector<Tensor>& inputs);

// Observes every dispatched op (used by tests that check registry coverage, later the profiler).
using DispatchObserver = std::function<void(const Op& op)>;
void set_dispatch_observer(DispatchObserver observer);

// NaN/Inf check used by anomaly mode (forward here, backward in the engine).
bool has_nonfinite(const Tensor& t);

}  // namespace kiln
