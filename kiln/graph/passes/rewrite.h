#pragma once
// What the passes need to know about a graph before they change it: who produces and who reads
// each value, which values share memory with a value that some node writes, and the edits they
// make (redirect the readers of a value, drop nodes, renumber).
#include <cstdint>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph::passes {

// Note [pass soundness]
// ~~~~~~~~~~~~~~~~~~~~~
// Values name memory (Note [graph IR]), so a rewrite that is right for pure dataflow can be wrong
// around an effect. The passes keep four rules, checked through GraphFacts:
//   - a node with an effect (it writes an input, draws random numbers, or holds a subgraph that
//     does either) is never removed, merged, moved or folded: removing a random node would shift
//     every later draw away from the numbers eager code draws; the one exception is `hoist`,
//     which moves a node that writes memory earlier past nodes that touch none of the memory it
//     reads or writes (Note [hoisting writes]);
//   - a value whose memory is written by some node (directly, or through a view of it: `written`)
//     is never merged with another value nor replaced by another value, and no value is replaced
//     by one whose memory is written;
//   - a graph output is never redirected to a graph input or a capture: the caller would get
//     their own tensor (or a parameter) back where eager returns new memory;
//   - a replacement has the dtype and the (symbolic) shape of the value it replaces.
// Every pass is tested against the unoptimized graph on real inputs (tests/graph/passes).
struct GraphFacts {
  explicit GraphFacts(const Graph& g);
  std::vector<int> producer;    // node index per value, -1 for inputs and captures
  std::vector<int> uses;        // reads per value by nodes, plus one per graph output
  std::vector<char> is_output;  // per value
  std::vector<char> is_input;   // per value: a graph input
  std::vector<int> capture_of;  // per value: index into captures, -1 otherwise
  std::vector<int> root;        // per value: the value whose memory it views (itself if none)
  std::vector<char> written;    // per value: its root's memory is written by some node
  std::vector<char> effectful;  // per node
  bool memory_written(int value) const { return written[static_cast<size_t>(value)] != 0; }
};

// Whether a node writes memory, draws random numbers, or holds a subgraph that may.
bool has_effects(const Node& node);

// Points every node input and graph output that reads `from` at `to` instead.
void replace_uses(Graph& g, int from, int to);

// Removes the nodes flagged in `drop` (by index), keeping the order of the others.
void drop_nodes(Graph& g, const std::vector<char>& drop);

// Renumbers the values so that only those an input, a capture or a node refer to remain, in their
// old order (values[i].id == i again). Returns the number of values removed.
int compact(Graph& g);

}  // namespace kiln::graph::passes
