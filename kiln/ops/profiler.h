#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

// Per-op totals of a profiling session, like torch.profiler's key_averages().
struct OpProfile {
  std::string name;
  int64_t calls = 0;
  double self_ms = 0.0;   // time in the op's own kernel, excluding ops it dispatched itself
  double total_ms = 0.0;  // including nested ops
  double flops = 0.0;     // floating-point operations, for ops that define Op::flops
};

// Note [profiler]
// ~~~~~~~~~~~~~~~
// Every op that runs through the dispatcher while a Profiler is active is timed (its forward or
// kernel, on real memory; meta tensors and shape inference are not counted). Backward passes are
// made of ops too, so they show up under their own names (conv2d_backward_weight, ...). Ops a
// kernel dispatches itself are nested: their time counts as the parent's total but not its self
// time, so the self column adds up to the time spent in ops. Ops from every thread (DataLoader
// workers included) are collected. The profiler is a process-wide dispatch mode (Note [dispatch
// modes]); with no active profiler it costs one relaxed atomic load per op.
//
// KILN_PROFILE=1 in the environment starts a process-wide profiler when kiln is loaded and
// prints its table to stderr at exit.
class Profiler {
 public:
  Profiler();  // starts collecting
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Stops collecting (idempotent); results stay readable.
  void stop();
  void reset();
  // Sorted by self time, descending.
  std::vector<OpProfile> key_averages() const;
  // A table: op, calls, self ms, share of self time, total ms, GFLOP/s (where flops are known).
  std::string table(size_t max_rows = 25) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kiln
