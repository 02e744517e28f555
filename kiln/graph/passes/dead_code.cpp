// Dead-code elimination (Note [graph passes]): walks the nodes backwards keeping those with an
// effect and those whose outputs a kept node or the graph's outputs read; captures nothing reads
// any more are released too (the graph stops holding their tensors).
#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"

namespace kiln::graph::passes {

bool eliminate_dead_code(Graph& g) {
  const GraphFacts facts(g);
  std::vector<char> live(g.values.size(), 0);
  for (int id : g.outputs) live[static_cast<size_t>(id)] = 1;
  std::vector<char> drop(g.nodes.size(), 0);
  bool changed = false;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& node = g.nodes[i];
    bool needed = facts.effectful[i] != 0;
    for (int id : node.outputs)
      needed = needed || (id != kNoValue && live[static_cast<size_t>(id)]);
    if (!needed) {
      drop[i] = 1;
      changed = true;
      continue;
    }
    for (int id : node.inputs) live[static_cast<size_t>(id)] = 1;
    for_each_sym_leaf(node, [&](int id) { live[static_cast<size_t>(id)] = 1; });
  }
  if (changed) drop_nodes(g, drop);
  const size_t before = g.captures.size();
  std::erase_if(g.captures, [&](const Capture& c) { return !live[static_cast<size_t>(c.value)]; });
  changed = changed || g.captures.size() != before;
  if (changed) compact(g);
  return changed;
}

}  // namespace kiln::graph::passes
