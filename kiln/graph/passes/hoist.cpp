// Hoisting writes (Note [hoisting writes]).
#include <algorithm>

#include "kiln/graph/control_flow_ops.h"
#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"

namespace kiln::graph::passes {

// Note [hoisting writes]
// ~~~~~~~~~~~~~~~~~~~~~~
// A traced training step computes every gradient, then runs the optimizer's updates, so every
// parameter's gradient is alive until the end of the backward pass (ResNet-18: 45 MB), as in an
// eager step. An update needs only its own gradient: this pass moves each node that writes memory
// (Note [effects]) up to just after the last node it depends on, so that the gradient dies as soon
// as it has been applied, as PyTorch's optimizer-in-backward hooks do by hand. A node that writes
// may run before node k when k
//   - makes none of its inputs,
//   - reads and writes none of the memory it writes (its written inputs' roots, views included),
//   - writes none of the memory it reads;
// so every access to that memory keeps its order, and the values every node reads are unchanged:
// results are bit for bit the graph's. Random draws (Note [random effects]) and nodes holding
// subgraphs never move, and nothing moves past them.
namespace {

bool hoistable(const Node& node) {
  return node.op->mutates() != 0 && !node.op->draws_random() &&
         detail::subgraphs_of(*node.op).empty();
}

bool moves_past(const Node& node) {
  return !node.op->draws_random() && detail::subgraphs_of(*node.op).empty();
}

}  // namespace

bool hoist_writes(Graph& g) {
  bool changed = false;
  for (size_t e = 0; e < g.nodes.size(); ++e) {
    if (!hoistable(g.nodes[e])) continue;
    const GraphFacts facts(g);
    const Node& w = g.nodes[e];
    std::vector<int> written, read;  // roots
    const uint64_t mask = w.op->mutates();
    for (size_t k = 0; k < w.inputs.size(); ++k) {
      const int r = facts.root[static_cast<size_t>(w.inputs[k])];
      (k < 64 && (mask & (uint64_t{1} << k)) ? written : read).push_back(r);
    }
    auto among = [](const std::vector<int>& values, int v) {
      return std::find(values.begin(), values.end(), v) != values.end();
    };
    // The values the moving nodes read, and the views that move along: a view that only w reads
    // (copy_ reads its source through an expand) reads no memory when it is made.
    std::vector<int> needed = w.inputs;
    std::vector<size_t> carried;
    size_t p = e;  // w (and the carried views) run before node p
    while (p > 0) {
      const Node& k = g.nodes[p - 1];
      bool makes_needed = false;
      for (int id : k.outputs) makes_needed = makes_needed || (id != kNoValue && among(needed, id));
      if (makes_needed && k.op->is_view() && k.outputs.size() == 1 &&
          facts.uses[static_cast<size_t>(k.outputs[0])] == 1 && !facts.effectful[p - 1]) {
        carried.push_back(p - 1);
        std::erase(needed, k.outputs[0]);
        needed.insert(needed.end(), k.inputs.begin(), k.inputs.end());
        --p;
        continue;
      }
      bool blocked = makes_needed || !moves_past(k);
      const uint64_t kmask = k.op->mutates();
      for (size_t j = 0; j < k.inputs.size() && !blocked; ++j) {
        const int r = facts.root[static_cast<size_t>(k.inputs[j])];
        const bool writes = j < 64 && (kmask & (uint64_t{1} << j));
        blocked = among(written, r) || (writes && among(read, r));
      }
      if (blocked) break;
      --p;
    }
    // Carried views that ended where they were (nothing passed) stay; the rest move with w.
    while (!carried.empty() && carried.back() == p) {
      carried.pop_back();
      ++p;
    }
    if (p == e) continue;
    std::vector<size_t> moving(carried.rbegin(), carried.rend());
    moving.push_back(e);
    std::vector<Node> unit;
    for (size_t i : moving) unit.push_back(std::move(g.nodes[i]));
    for (size_t i = moving.size(); i-- > 0;)
      g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(moving[i]));
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(p),
                   std::make_move_iterator(unit.begin()), std::make_move_iterator(unit.end()));
    changed = true;
  }
  return changed;
}

}  // namespace kiln::graph::passes
