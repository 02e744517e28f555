#pragma once
// The ops "cond" and "while_loop" that traced control flow records (Note [control flow]); their
// definitions are in control_flow_ops.cpp, the public functions in control_flow.cpp.
#include <memory>
#include <vector>

#include "kiln/graph/control_flow.h"
#include "kiln/graph/graph.h"

namespace kiln::graph::detail {

// Inputs: pred, the operands, then's extra inputs, else's extra inputs.
OpPtr make_cond_op(std::shared_ptr<const Graph> then_g, std::shared_ptr<const Graph> else_g,
                   int64_t operands);
// Inputs: the loop vars, cond's extra inputs, body's extra inputs.
OpPtr make_while_op(std::shared_ptr<const Graph> cond_g, std::shared_ptr<const Graph> body_g,
                    int64_t loop_vars, int64_t max_iterations);

// fn traced into a subgraph on stand-ins shaped like `operands` (meta or real), its captures
// made inputs (their tensors appended to `extra`) and its sizes erased.
std::shared_ptr<const Graph> trace_branch(const char* what, const Branch& fn,
                                          const std::vector<Tensor>& operands,
                                          std::vector<Tensor>& extra, const Loc& loc);

// A branch's subgraph as a node holds it: captures made inputs (appended after the operands,
// their tensors returned), every size erased (Note [control flow]).
std::vector<Tensor> lift_captures(Graph& g);
void erase_sizes(Graph& g);

// The subgraphs a cond or while_loop node holds (empty for any other op), so that the passes can
// see the effects inside them (Note [pass soundness]).
std::vector<std::shared_ptr<const Graph>> subgraphs_of(const Op& op);

}  // namespace kiln::graph::detail
