#pragma once
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph {

// Note [graph executor]
// ~~~~~~~~~~~~~~~~~~~~~
// Runs a graph on real tensors: binds the inputs (checked against the input values' dtypes and
// shapes; a symbolic dim takes the call's size, the same for every use of its symbol) and the
// captures, then dispatches each node's op in order (dispatcher.h), so infer re-runs for the
// call's sizes, memory comes from the caching allocator and the modes on the stack see the
// calls as they see eager ones: the tape records only when an input requires grad (gradients
// through a graph are the ops' own vjps, as in eager), a tracer pushed around the call inlines
// the graph into its own. The graph is only read, so one graph may run on several threads at once.
// A random node is rebuilt at a fresh place of the default generator's stream before it runs
// (Note [random effects]): every run draws new numbers, and after the same manual_seed a graph
// draws exactly what eager code does.
// Each intermediate value is released right after the last node that reads it (and an output no
// node reads, right after it is made), so a graph's peak memory is what is live at one node, not
// the sum of its intermediates; graph outputs are kept.
// With a planner, intermediates live in an arena planned for the call's shapes (Note [memory
// planner]) and a node whose op allows it computes into an input that dies there (Note [in-place
// computation]); without one, every allocation goes to the caching allocator.
// An error a node raises names the graph and the node's source line.
class MemoryPlanner;
std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs,
                        const Loc& loc = Loc::current(), MemoryPlanner* planner = nullptr);

// Checks that `inputs` fit the graph's inputs (count, dtype, rank, static dims, consistent
// symbols) and returns each symbol's size in this call, by symbol.
std::vector<std::pair<std::string, int64_t>> bind_symbols(const Graph& g,
                                                          const std::vector<Tensor>& inputs,
                                                          const Loc& loc);

// Note [size guards]: the first of the graph's guards that inputs fitting it (bind_symbols) break,
// or null when every one holds.
const SymGuard* broken_guard(const Graph& g, const std::vector<Tensor>& inputs);
// What a guard assumed, in the graph's symbol names: "batch != 1 was assumed at model.cpp:12",
// "batch was converted to the number 11 at model.cpp:12".
std::string assumption(const Graph& g, const SymGuard& guard);

}  // namespace kiln::graph
