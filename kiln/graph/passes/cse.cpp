// Common-subexpression elimination (Note [graph passes]): two nodes with the same op (its name
// and attrs, which identify it: Note [op factory]) reading the same values compute the same
// outputs, so the later one is dropped and its readers read the earlier one's outputs. Nodes with
// an effect, and values whose memory some node writes, are left alone (Note [pass soundness]).
// "The same values" means the same memory contents: a value read again after a node wrote its
// memory is another input, so the key holds each input's write count so far.
#include <fmt/format.h>

#include <unordered_map>

#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"

namespace kiln::graph::passes {

bool eliminate_common_subexpressions(Graph& g) {
  const GraphFacts facts(g);
  std::vector<int> rename(g.values.size());
  for (size_t v = 0; v < rename.size(); ++v) rename[v] = static_cast<int>(v);
  std::unordered_map<std::string, size_t> seen;  // key -> node index
  std::vector<char> drop(g.nodes.size(), 0);
  std::vector<int> writes(g.values.size(), 0);  // per root
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& node = g.nodes[i];
    for (int& id : node.inputs) id = rename[static_cast<size_t>(id)];
    remap_sym_leaves(node, [&](int id) { return rename[static_cast<size_t>(id)]; });
    if (facts.effectful[i]) {
      const uint64_t mask = node.op->mutates();
      for (size_t k = 0; k < node.inputs.size() && k < 64; ++k)
        if (mask & (uint64_t{1} << k))
          ++writes[static_cast<size_t>(facts.root[static_cast<size_t>(node.inputs[k])])];
      continue;
    }
    bool mergeable = !node.outputs.empty();
    for (int id : node.outputs)
      mergeable = mergeable && id != kNoValue && !facts.memory_written(id);
    if (!mergeable) continue;
    std::string key = node.op->name();
    key += node.op->attrs().dump();
    for (const SymAttr& s : node.sym_attrs) key += s.path + "=" + s.value.to_json().dump();
    for (int id : node.inputs)
      key += fmt::format(",{}@{}", id,
                         writes[static_cast<size_t>(facts.root[static_cast<size_t>(id)])]);
    auto [it, fresh] = seen.emplace(std::move(key), i);
    if (fresh) continue;
    const Node& kept = g.nodes[it->second];
    if (kept.outputs.size() != node.outputs.size()) continue;
    bool both_outputs = false;
    for (size_t k = 0; k < node.outputs.size(); ++k)
      both_outputs = both_outputs || (facts.is_output[static_cast<size_t>(node.outputs[k])] &&
                                      facts.is_output[static_cast<size_t>(kept.outputs[k])]);
    if (both_outputs) continue;  // the caller gets two distinct tensors, as from eager code
    for (size_t k = 0; k < node.outputs.size(); ++k)
      rename[static_cast<size_t>(node.outputs[k])] = kept.outputs[k];
    drop[i] = 1;
    changed = true;
  }
  if (!changed) return false;
  for (int& id : g.outputs) id = rename[static_cast<size_t>(id)];
  drop_nodes(g, drop);
  compact(g);
  return true;
}

}  // namespace kiln::graph::passes
