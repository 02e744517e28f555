#include "kiln/graph/passes/rewrite.h"

#include <algorithm>

#include "kiln/graph/control_flow_ops.h"

namespace kiln::graph::passes {

bool has_effects(const Node& node) {
  if (node.op->mutates() != 0 || node.op->draws_random()) return true;
  for (const auto& sub : detail::subgraphs_of(*node.op))
    for (const Node& inner : sub->nodes)
      if (has_effects(inner)) return true;
  return false;
}

GraphFacts::GraphFacts(const Graph& g) {
  const size_t n = g.values.size();
  producer.assign(n, -1);
  uses.assign(n, 0);
  is_output.assign(n, 0);
  is_input.assign(n, 0);
  capture_of.assign(n, -1);
  root.resize(n);
  written.assign(n, 0);
  effectful.assign(g.nodes.size(), 0);
  for (size_t v = 0; v < n; ++v) root[v] = static_cast<int>(v);
  for (int id : g.inputs) is_input[static_cast<size_t>(id)] = 1;
  for (size_t c = 0; c < g.captures.size(); ++c)
    capture_of[static_cast<size_t>(g.captures[c].value)] = static_cast<int>(c);
  for (int id : g.outputs) {
    is_output[static_cast<size_t>(id)] = 1;
    ++uses[static_cast<size_t>(id)];
  }
  std::vector<int> written_roots;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    for (int id : node.inputs) ++uses[static_cast<size_t>(id)];
    for_each_sym_leaf(node, [&](int id) { ++uses[static_cast<size_t>(id)]; });
    for (int id : node.outputs)
      if (id != kNoValue) producer[static_cast<size_t>(id)] = static_cast<int>(i);
    effectful[i] = has_effects(node);
    // A view's outputs share its first input's memory.
    if (node.op->is_view() && !node.inputs.empty())
      for (int id : node.outputs)
        if (id != kNoValue)
          root[static_cast<size_t>(id)] = root[static_cast<size_t>(node.inputs[0])];
    const uint64_t mask = node.op->mutates();
    for (size_t k = 0; k < node.inputs.size() && k < 64; ++k)
      if (mask & (uint64_t{1} << k))
        written_roots.push_back(root[static_cast<size_t>(node.inputs[k])]);
    // An output of a writing node may be the written memory itself (alias_of): count it as
    // written too rather than working out which.
    if (mask != 0)
      for (int id : node.outputs)
        if (id != kNoValue) written_roots.push_back(root[static_cast<size_t>(id)]);
  }
  std::vector<char> root_written(n, 0);
  for (int r : written_roots) root_written[static_cast<size_t>(r)] = 1;
  for (size_t v = 0; v < n; ++v) written[v] = root_written[static_cast<size_t>(root[v])];
}

void replace_uses(Graph& g, int from, int to) {
  for (Node& node : g.nodes) {
    for (int& id : node.inputs)
      if (id == from) id = to;
    remap_sym_leaves(node, [&](int id) { return id == from ? to : id; });
  }
  for (int& id : g.outputs)
    if (id == from) id = to;
}

void drop_nodes(Graph& g, const std::vector<char>& drop) {
  size_t kept = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (drop[i]) continue;
    if (kept != i) g.nodes[kept] = std::move(g.nodes[i]);
    ++kept;
  }
  g.nodes.resize(kept);
}

int compact(Graph& g) {
  std::vector<char> referenced(g.values.size(), 0);
  auto mark = [&](int id) {
    if (id != kNoValue) referenced[static_cast<size_t>(id)] = 1;
  };
  for (int id : g.inputs) mark(id);
  for (const Capture& c : g.captures) mark(c.value);
  for (const Node& node : g.nodes) {
    for (int id : node.inputs) mark(id);
    for (int id : node.outputs) mark(id);
    for_each_sym_leaf(node, mark);
  }
  for (int id : g.outputs) mark(id);
  std::vector<int> renumber(g.values.size(), kNoValue);
  std::vector<Value> values;
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (!referenced[v]) continue;
    renumber[v] = static_cast<int>(values.size());
    values.push_back(std::move(g.values[v]));
    values.back().id = renumber[v];
  }
  const int removed = static_cast<int>(g.values.size() - values.size());
  g.values = std::move(values);
  auto map = [&](int& id) {
    if (id != kNoValue) id = renumber[static_cast<size_t>(id)];
  };
  for (int& id : g.inputs) map(id);
  for (Capture& c : g.captures) map(c.value);
  for (Node& node : g.nodes) {
    for (int& id : node.inputs) map(id);
    for (int& id : node.outputs) map(id);
    remap_sym_leaves(node, [&](int id) { return renumber[static_cast<size_t>(id)]; });
  }
  for (int& id : g.outputs) map(id);
  return removed;
}

}  // namespace kiln::graph::passes
