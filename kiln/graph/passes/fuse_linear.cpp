// Linear + activation fusion (Note [graph passes]): in a frozen (inference) graph, a float32
//   linear(x, w, b?) [-> relu]
// whose output only the relu reads (or a linear without one) becomes fused_linear(x, w, b?)
// {activation}, which runs the product, the bias and the relu as one oneDNN matmul with post-ops
// (kiln/backend/onednn/fused_linear_ops.cpp): the output is written once instead of three times.
// Only with `freeze`, like conv_bn, and for the same reason: it is not bit for bit (oneDNN's
// matmul with post-ops may block the product differently than the plain matmul, ~1e-6
// relative), and only an inference graph has agreed to that.
#include <cstring>

#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"
#include "kiln/ops/op_factory.h"

namespace kiln::graph::passes {
namespace {

bool is(const Node& node, const char* name) {
  return std::strcmp(node.op->name(), name) == 0;
}

}  // namespace

bool fuse_linear(Graph& g, bool freeze) {
  if (!freeze) return false;
  const GraphFacts facts(g);
  // The reader of each value that has exactly one (and is no graph output).
  std::vector<int> sole(g.values.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int id : g.nodes[n].inputs)
      if (facts.uses[static_cast<size_t>(id)] == 1 && !facts.is_output[static_cast<size_t>(id)])
        sole[static_cast<size_t>(id)] = static_cast<int>(n);
  std::vector<char> drop(g.nodes.size(), 0);
  bool changed = false;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    Node& node = g.nodes[n];
    if (!is(node, "linear") || facts.effectful[n] || node.outputs.size() != 1) continue;
    const int y = node.outputs[0];
    if (g.value(y).dtype != DType::Float32 || facts.memory_written(y)) continue;
    const bool has_bias = node.inputs.size() == 3;
    std::string activation = "none";
    const int r = sole[static_cast<size_t>(y)];
    if (r >= 0 && is(g.nodes[static_cast<size_t>(r)], "relu") &&
        !facts.effectful[static_cast<size_t>(r)]) {
      activation = "relu";
      node.outputs = g.nodes[static_cast<size_t>(r)].outputs;
      drop[static_cast<size_t>(r)] = 1;
    }
    node.op = make_op("fused_linear", {{"has_bias", has_bias}, {"activation", activation}});
    changed = true;
  }
  if (!changed) return false;
  drop_nodes(g, drop);
  compact(g);
  return true;
}

}  // namespace kiln::graph::passes
