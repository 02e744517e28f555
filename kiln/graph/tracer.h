#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/core/sym_int.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/tensor_spec.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/dispatcher.h"

namespace kiln::graph {

// Note [tracer]
// ~~~~~~~~~~~~~
// The tracer is one more dispatch mode (Note [dispatch modes]): pushed on this thread while the
// user's code runs, it sees every op call after infer and turns it into a node. It runs on meta
// tensors, so a trace does no arithmetic:
//   - a graph input is a meta tensor made from its spec;
//   - a real tensor the code reads without making it (a parameter, a buffer, a constant) becomes
//     a capture, held by identity, and the op sees a meta stand-in with its geometry;
//   - the call goes on to the modes below and the kernel step with every input replaced by its
//     meta stand-in and every output on meta, so the outputs the user's code gets are meta
//     tensors with eager's geometry (Note [faithful meta]) and the tape below records them as it
//     would eager ones (a backward() inside the traced code is traced too: the engine dispatches
//     the vjps' ops);
//   - each node holds an op rebuilt from (name, attrs) through the op factory, so a traced graph
//     is exactly what its JSON holds; an op without a factory cannot be traced, and says so.
// Reading a stand-in's values (item(), to_vector, data, printing) throws "[trace] 'f' reads the
// value of %3: float32[batch, 10] (item); ..." at the user's line (Note [value reads]).
// A random draw (dropout's mask) is a node that the executor gives fresh blocks of the default
// generator on every run (Note [random effects]): a traced dropout draws new masks per call,
// the ones eager code would have drawn; a draw from another Generator fails the trace.
// An output that is a written input (an in-place op) is a new value for the same memory: later
// reads of the tensor read the new value. Ops inside a composite op are not seen (Note
// [composite ops]): the composite is one node.
class Tracer {
 public:
  // Whether a tracer records this thread's ops now: code that skips work on meta tensors (a
  // layer's counter update, which a shape-only pass must not do) must not skip it in a trace.
  static bool active();

  explicit Tracer(std::string name);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A meta tensor standing for a graph input; symbolic dims take their size from `probe` (the
  // size they are traced at).
  Tensor add_input(const TensorSpec& spec, int64_t probe);
  // The same, with each symbol's size from `size_of(symbol)`.
  Tensor add_input(const TensorSpec& spec,
                   const std::function<int64_t(const std::string&)>& size_of);
  // A graph input shaped like `example` (static dims, the example's strides and offset, so the
  // trace sees the layout the call will have).
  Tensor add_input(const Tensor& example, std::string name = "");
  // Starts recording this thread's ops (pushes the mode); stop() ends it. Inputs may be added
  // before or while recording.
  void start();
  void stop();
  // Ends the trace: `outputs` are the tensors the code returned (each one an input, a capture or
  // a node's output). Validates the graph.
  Graph finish(const std::vector<Tensor>& outputs, const Loc& loc = Loc::current());

  struct State;  // the trace so far, shared with the mode (tracer.cpp)

 private:
  std::shared_ptr<State> state_;
  std::unique_ptr<DispatchModeGuard> guard_;
  std::unique_ptr<kiln::detail::MixedMetaScope> mixed_;
  // What start() replaced on this thread (Note [value reads]); stop() puts them back.
  State* outer_trace_ = nullptr;
  kiln::detail::ValueReadHook outer_hook_ = nullptr;
  kiln::detail::GradInputHook outer_grad_hook_ = nullptr;
  kiln::detail::SymSizeHook outer_size_hook_ = nullptr;
  kiln::detail::SymGuardHook outer_guard_hook_ = nullptr;
  kiln::detail::SymUsableHook outer_usable_hook_ = nullptr;
};

}  // namespace kiln::graph
