#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::graph {

// Note [memory planner]
// ~~~~~~~~~~~~~~~~~~~~~
// The graph executor (Note [graph executor]) plans a graph's memory per concrete input shapes:
//   1. record: the first call with new shapes runs on the caching allocator while an allocation
//      session (Note [allocation sessions]) writes down every allocation the running thread makes
//      (node, size) and the moment it is released: the liveness of every intermediate, temporaries
//      inside kernels and memory shared by views included, over the graph's schedule. Where a
//      node's op may compute its output into a dying input (Note [in-place computation]) and the
//      executor found that input unshared, the record pairs the output with the input.
//   2. plan (plan_memory below): allocations released before the run ended get offsets in one
//      arena, an in-place pair the same bytes; what lives past the run (outputs, tensors a tape
//      or a cache keeps) stays with the allocator. Placement is greedy by size: the largest first,
//      each at the best-fitting gap among the allocations alive at the same time.
//   3. replay: later calls with the same shapes take an arena of the plan's size from a pool (a
//      concurrent call gets its own) and serve the k-th allocation from its offset, after checking
//      that it is the same node and size as recorded and that no live allocation holds those
//      bytes (an in-place partner only when the executor just approved it). Any mismatch sends
//      that allocation, or the rest of the run, to the caching allocator and the shapes are
//      recorded again on the next call: the plan changes where memory comes from, never what a
//      tensor holds. An arena whose memory a tensor still holds when the run ends stays with that
//      tensor and is freed with it. A shape's first arena is made after the caching allocator
//      returned its cached free blocks (what the recorded run freed is what the arena replaces),
//      so the process does not hold both.
// A planned run allocates one block per call instead of one per intermediate, and its peak is the
// arena (the most bytes alive at once, plus fragmentation of the placement) plus what it leaves to
// the allocator.

// One allocation of a recorded run. Times count allocations and releases in order.
struct AllocationRecord {
  int node = -1;        // the node that made it (-1: none, before the first)
  size_t nbytes = 0;    // as requested
  int64_t start = 0;    // allocated at
  int64_t end = -1;     // released at; -1 when still alive as the run ended
  int overwrites = -1;  // the allocation whose bytes it was computed into, or -1
};

struct MemoryPlan {
  // Per allocation, in record order.
  std::vector<int> nodes;
  std::vector<size_t> nbytes;
  std::vector<int64_t> offsets;  // in the arena, or -1: from the caching allocator
  std::vector<int> overwrites;   // the in-place partner sharing its bytes, or -1
  size_t arena_bytes = 0;
  // Figures for reports.
  size_t planned_bytes = 0;    // sum of the planned allocations' sizes (no reuse at all)
  size_t live_peak_bytes = 0;  // the most planned bytes alive at one time (a perfect packing)
  size_t unplanned_bytes = 0;  // sum of the allocations left to the caching allocator
  int planned = 0;             // allocations with an offset
  int in_place = 0;            // of them, computed into their partner's bytes
};

// Offsets are multiples of this (CachingAllocator::kAlignment).
constexpr size_t kArenaAlignment = 64;

MemoryPlan plan_memory(const std::vector<AllocationRecord>& records);

}  // namespace kiln::graph
