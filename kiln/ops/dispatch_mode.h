#pragma once
#include <memory>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln {

// One op call as the dispatcher hands it to modes: the op, its inputs, the output metadata that
// infer computed, and the caller's line.
struct OpCall {
  const OpPtr& op;
  const std::vector<Tensor>& inputs;
  const std::vector<TensorMeta>& metas;
  const Loc& loc;
};

class DispatchNext;

// Note [dispatch modes]
// ~~~~~~~~~~~~~~~~~~~~~
// Everything that wants to see or change op calls (the autograd tape, anomaly checks, the
// profiler, a tracer, later autocast) is a DispatchMode. A mode intercepts a call: it may work
// before and after it, and passes the call on with `next(call)`, which runs the modes below it
// and finally the kernel (not on meta tensors). A mode may also skip `next` and return outputs of
// its own, or dispatch other ops itself; ops a mode dispatches from inside handle() are seen only
// by the modes below it (as with PyTorch's dispatch modes, a mode does not see its own work).
// A mode may decline a call (intercepts() false): it is then skipped for that call, so the
// process-wide modes cost nothing on calls they ignore (the tape on calls without grad, the
// profiler and anomaly checks while off) and an eager call goes from infer to its kernel.
//
// Order, from the first to see a call to the last:
//   1. this thread's stack, most recently pushed first (DispatchModeGuard); a mode pushed on one
//      thread never sees another thread's ops, so modes need no locks;
//   2. the process-wide modes, by their rank (install_process_mode):
//        kTapeRank     autograd's tape: records a node for ops whose inputs require grad
//                      (intercepts exactly the calls should_record() accepts),
//        kAnomalyRank  anomaly mode's NaN/Inf check of outputs (intercepts under
//                      DetectAnomalyGuard),
//        kProfileRank  the profiler's timer (intercepts while a Profiler collects; it is
//                      process-wide so DataLoader workers' ops are counted too);
//   3. the kernel.
// So a tracer pushed by the user sees outputs that the tape already recorded (their grad_fn is
// set), and the profiler times only the kernel. A kernel that dispatches ops itself starts them
// at the top of the order again.
class DispatchMode {
 public:
  virtual ~DispatchMode() = default;
  virtual const char* name() const = 0;
  // Whether this mode wants to see the call; asked once per call, when the call reaches the
  // mode's place in the order. A mode that says no is skipped (no handle(), no frame), so a call
  // that interests no mode goes straight to its kernel: the eager fast path.
  virtual bool intercepts(const OpCall& /*call*/) const { return true; }
  virtual std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) = 0;
};

// The rest of the order below the mode that holds it.
struct DispatchChain;
class DispatchNext {
 public:
  std::vector<Tensor> operator()(const OpCall& call);

 private:
  friend struct DispatchChain;
  DispatchNext(const DispatchChain* chain, size_t level) : chain_(chain), level_(level) {}
  const DispatchChain* chain_;
  size_t level_;
};

// Pushes a mode on this thread's stack for the guard's lifetime. Guards must nest (LIFO).
class DispatchModeGuard {
 public:
  explicit DispatchModeGuard(std::shared_ptr<DispatchMode> mode);
  ~DispatchModeGuard();
  DispatchModeGuard(const DispatchModeGuard&) = delete;
  DispatchModeGuard& operator=(const DispatchModeGuard&) = delete;

 private:
  DispatchMode* mode_;
};

// This thread's pushed modes, bottom (first pushed) to top.
std::vector<std::shared_ptr<DispatchMode>> dispatch_mode_stack();

// Process-wide modes, installed once (at load time by the layer that owns them) and never
// removed; the ranks above fix their order. Installing is thread-safe and cheap to read.
constexpr int kTapeRank = 100;
constexpr int kAnomalyRank = 200;
constexpr int kProfileRank = 300;
void install_process_mode(int rank, std::shared_ptr<DispatchMode> mode);

namespace detail {
// The dispatcher's entry into the order (dispatcher.cpp); the second form with this thread's
// state already read (Note [dispatch state]).
struct DispatchState;
std::vector<Tensor> run_dispatch_modes(const OpCall& call);
std::vector<Tensor> run_dispatch_modes(DispatchState& state, const OpCall& call);
// The last step: run the op's forward on real memory, or make meta outputs.
std::vector<Tensor> run_kernel(const OpCall& call);

// Note [composite ops]: an op that keeps its identity for consumers (matmul, linear, batch norm
// in evaluation mode, a custom function) but computes its result by calling other public ops
// runs them inside this scope: they go straight to their kernels, past every mode, with grad
// mode off. A mode sees the composite as one op with one output per declared output (a tracer
// records one "matmul" node, the tape one node whose vjp is the composite's own, the profiler
// times the whole); the ops inside are an implementation detail, like a kernel's loops.
class CompositeScope {
 public:
  CompositeScope();
  ~CompositeScope();
  CompositeScope(const CompositeScope&) = delete;
  CompositeScope& operator=(const CompositeScope&) = delete;

 private:
  bool saved_;
  bool grad_saved_;
};
}  // namespace detail

}  // namespace kiln
