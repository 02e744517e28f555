#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/graph/memory_planner.h"
#include "kiln/graph/passes/pass.h"
#include "kiln/graph/tensor_spec.h"

namespace kiln::graph {

// Note [function cache]
// ~~~~~~~~~~~~~~~~~~~~~
// kiln::graph::function(fn, ...) is tf.function for C++: calling it traces fn once per kind of
// call (Note [tracer]) and runs the graph (Note [graph executor]) from then on.
//   With a signature, fn is traced when the function is made, with every symbolic dim symbolic
//   (Note [symbolic dims]), in the grad mode of that moment; a call in the other grad mode
//   retraces once (recording a gradient can change the ops: conv2d_affine emits its
//   differentiable decomposition), as does a call in another state (below). A call that does
//   not fit the signature is an error naming the input, the spec and the given shape.
//   Without one, a call is keyed by each input's dtype, shape and layout (contiguous,
//   channels-last or other strides), whether it requires grad, and grad mode: all of these can
//   change which ops fn's code emits. A call whose key matches a cached trace runs it; any other
//   call retraces, and the retrace is reported in one line saying what differs from the nearest
//   cached trace and where that one was traced:
//     retracing 'forward': input 0 'x' dim 2 changed 28 -> 32 (traced at main.cpp:10)
//   With a signature, a call that breaks what the symbolic trace assumed of its sizes (Note [size
//   guards]: an `if` on x.size(0), a size converted to a number) retraces once per such sizes, a
//   graph specialized to them, and the line says which assumption and where:
//     retracing 'f': batch != 1 was assumed at model.cpp:12, and this call has batch = 1 (...)
//   The key also holds FunctionOptions::state_key's text (a module's train/eval mode), with a
//   signature too.
//   Retraces go through the function's RetracePolicy (logged to stderr by default; silent; or an
//   error). More than `retrace_budget` traces is an error listing every reason.
// Every trace goes through the graph optimizer (Note [graph passes]) before it is cached, so
// graphs() returns optimized graphs (FunctionOptions::optimize = false keeps the raw trace).
// Each cached graph has its memory planner (Note [memory planner]): a call's intermediates come
// from an arena planned for its concrete shapes once a call with those shapes has been recorded.
// The cache is guarded by a mutex; graphs are immutable once cached, so calls run concurrently
// (a trace in progress holds the lock: another thread's call waits for it).
enum class RetracePolicy { kLog, kSilent, kError };

struct FunctionOptions {
  std::string name = "function";
  RetracePolicy on_retrace = RetracePolicy::kLog;
  int retrace_budget = 8;  // traces allowed beyond the first
  // Where kLog writes (stderr when empty).
  std::function<void(const std::string&)> logger = nullptr;
  // State outside the inputs that changes which ops fn emits, as a short text computed at every
  // call (a module's train/eval mode: "train", "eval"). Part of the cache key, with a signature
  // too: a call in another state retraces ("retracing 'forward': state changed train -> eval").
  std::function<std::string()> state_key = nullptr;
  // A name for a captured tensor ("conv1.weight"; empty: none), shown in the text, the DOT and
  // the JSON of the graph.
  std::function<std::string(const Tensor&)> capture_name = nullptr;
  // Every trace goes through the graph optimizer (Note [graph passes]) before it is cached;
  // `passes` says how (freeze the captures, skip passes by name).
  bool optimize = true;
  OptimizeOptions passes = {};
  // Whether calls record a tape (in grad mode, for inputs or captures that require grad). A graph
  // that computes its own gradients (a training step) sets false: taping its forward nodes would
  // keep every activation alive until the outputs die. The key still holds grad mode.
  bool record_tape = true;
  // Whether calls run on planned memory (Note [memory planner]): per graph and concrete input
  // shapes, the first call records, later ones take one arena. False: the caching allocator.
  bool plan_memory = true;
};

struct FunctionStats {
  int traces = 0;
  int hits = 0;
  std::vector<std::string> retrace_reasons;   // one per retrace, in order
  std::vector<OptimizeReport> optimizations;  // one per trace, when optimizing
};

class Function {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  Function(Fn fn, std::optional<std::vector<TensorSpec>> signature, FunctionOptions options,
           const Loc& loc);

  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs,
                                 const Loc& loc = Loc::current()) const;
  FunctionStats stats() const;
  // Each cached graph's memory planner figures, in the order of graphs().
  std::vector<MemoryPlannerStats> memory_stats() const;
  // Frees the planned arenas no call is using, as empty_cache() frees cached blocks (the next
  // call makes a new one); their memory goes back to the caching allocator.
  void release_idle_arenas() const;
  // The cached graphs, in the order they were traced.
  std::vector<std::shared_ptr<const Graph>> graphs() const;
  const std::string& name() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// A function with a signature: traced now, every call checked against it.
Function function(Function::Fn fn, std::vector<TensorSpec> signature, FunctionOptions options = {},
                  const Loc& loc = Loc::current());
// A function without one: traced per kind of call (Note [function cache]).
Function function(Function::Fn fn, FunctionOptions options = {}, const Loc& loc = Loc::current());

}  // namespace kiln::graph
