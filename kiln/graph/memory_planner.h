#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kiln/core/allocation_session.h"
#include "kiln/core/tensor.h"
#include "kiln/graph/memory_plan.h"
#include "kiln/ops/op.h"

namespace kiln::graph {

// What a graph's planner did (Note [memory planner]), summed over its shapes unless said.
struct MemoryPlannerStats {
  int shapes = 0;         // concrete input shapes seen (at most kMaxShapes kept)
  int recordings = 0;     // runs that recorded
  int replays = 0;        // runs served from a plan
  int diverged = 0;       // replays that met an allocation the plan did not expect
  int kept_arenas = 0;    // replays whose arena a tensor still held at the end
  int disabled = 0;       // shapes given up on (they kept diverging): plain allocator
  int64_t fallbacks = 0;  // planned allocations served by the allocator (bytes still in use)
  int64_t arena_allocations = 0;  // allocations served from arenas
  int64_t arenas = 0;             // arenas made (one per concurrent call per shape)
  // The most recent plan's figures.
  std::optional<MemoryPlan> last_plan;
};

class PlannedRun;

// One graph's plans, by concrete input shapes (the graph's dtypes are fixed): made by the
// executor's caller (the function cache keeps one per graph) and shared by concurrent calls.
class MemoryPlanner {
 public:
  static constexpr int kMaxShapes = 16;     // least recently used shapes are dropped beyond
  static constexpr int kMaxRecordings = 4;  // per shape, before giving up on it

  MemoryPlanner();
  ~MemoryPlanner();
  MemoryPlanner(const MemoryPlanner&) = delete;
  MemoryPlanner& operator=(const MemoryPlanner&) = delete;

  // The session for one run with these inputs: recording, replaying, or null (given up).
  std::unique_ptr<PlannedRun> begin(const std::vector<Tensor>& inputs);
  MemoryPlannerStats stats() const;
  // Frees the arenas no call is using (the caching allocator keeps their memory).
  void release_idle_arenas();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

class ShapePlan;
class RunSession;

// One planned run, driven by the executor: current on the thread from begin() to its end.
class PlannedRun {
 public:
  PlannedRun(std::shared_ptr<MemoryPlanner::State> planner, std::shared_ptr<ShapePlan> shape,
             std::shared_ptr<RunSession> session);
  ~PlannedRun();  // ends the run: records, returns the arena or keeps it with a survivor
  PlannedRun(const PlannedRun&) = delete;
  PlannedRun& operator=(const PlannedRun&) = delete;

  // Before node n runs; `overwritable` is the memory of an input its output may be computed into
  // (overwritable_input), or null.
  void begin_node(int n, const void* overwritable);
  // After node n ran, with its outputs.
  void end_node(const std::vector<Tensor>& outputs);

 private:
  std::shared_ptr<MemoryPlanner::State> planner_;
  std::shared_ptr<ShapePlan> shape_;
  std::shared_ptr<RunSession> session_;
  AllocationSessionScope scope_;
};

// The memory of the input of `op` that the op's output 0 may be computed into (Note [in-place
// computation]): one the op allows, that dies at this node (`dying`, per input), held by nobody
// but the executor (no view, no other handle, no tape about to save it), dense from the start of
// its storage, and with output 0's shape, dtype and layout. Null when there is none.
const void* overwritable_input(const Op& op, const std::vector<Tensor>& args,
                               const std::vector<bool>& dying, const Loc& loc);

}  // namespace kiln::graph
