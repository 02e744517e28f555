// Constant folding (Note [graph passes]): with `freeze`, a pure node whose inputs are all frozen
// captures (or values folded before it) runs once, now, and its outputs become captures. An
// inference graph's weight preprocessing (conv_bn_fold's scale and shift, a transposed weight, a
// weight cast) then costs nothing per call. Without `freeze` nothing folds: captures are held by
// identity (Note [graph IR]) so that an optimizer step is seen by the next call, and the only
// other constants, the scalars of expressions, stay nodes because a serialized capture would lose
// their promotion rule (a wrapped number).
#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/dispatcher.h"

namespace kiln::graph::passes {

bool fold_constants(Graph& g, bool freeze) {
  if (!freeze) return false;
  const GraphFacts facts(g);
  std::vector<Tensor> constant(g.values.size());
  for (const Capture& c : g.captures)
    if (!facts.memory_written(c.value)) constant[static_cast<size_t>(c.value)] = c.tensor;
  std::vector<char> drop(g.nodes.size(), 0);
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    if (facts.effectful[i] || node.inputs.empty()) continue;
    bool foldable = true;
    for (int id : node.inputs) foldable = foldable && constant[static_cast<size_t>(id)].defined();
    // An output stays a node: eager code returns new memory on every call.
    for (int id : node.outputs)
      foldable = foldable && (id == kNoValue || (!facts.is_output[static_cast<size_t>(id)] &&
                                                 !facts.memory_written(id)));
    if (!foldable) continue;
    std::vector<Tensor> args;
    for (int id : node.inputs) args.push_back(constant[static_cast<size_t>(id)]);
    std::vector<Tensor> outs;
    {
      // Straight to the kernels, past every mode (a tracer around the compile, the tape) and
      // with grad mode off: a frozen graph's constants have no history.
      detail::CompositeScope scope;
      outs = dispatch(node.op, args, node.loc ? *node.loc : Loc::current());
    }
    for (size_t k = 0; k < node.outputs.size() && k < outs.size(); ++k) {
      const int id = node.outputs[k];
      if (id == kNoValue) continue;
      constant[static_cast<size_t>(id)] = outs[k];
      g.captures.push_back({id, outs[k]});
    }
    drop[i] = 1;
    changed = true;
  }
  if (changed) drop_nodes(g, drop);  // captures nothing reads any more go in dce
  return changed;
}

}  // namespace kiln::graph::passes
