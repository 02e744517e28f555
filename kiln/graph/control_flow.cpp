// kiln::cond and kiln::while_loop: eager calls run the branch; traced calls record one node
// holding the branches' subgraphs (Note [control flow]).
#include "kiln/graph/control_flow.h"

#include <fmt/format.h>

#include "kiln/graph/control_flow_ops.h"
#include "kiln/graph/tracer.h"
#include "kiln/ops/dispatcher.h"

namespace kiln {

namespace {

using Tensors = std::vector<Tensor>;

void check_defined(const char* op, const char* what, const Tensors& ts, const Loc& loc) {
  for (size_t i = 0; i < ts.size(); ++i)
    if (!ts[i].defined()) fail(op, loc, "{} {} is undefined", what, i);
}

bool truth(const Tensor& pred, const char* op, const char* what, const Loc& loc) {
  if (!pred.defined() || pred.numel() != 1)
    fail(op, loc, "expected {} of one element, but got {}", what,
         pred.defined() ? pred.describe() : "an undefined tensor");
  return pred.item(loc) != 0;
}

// Note [size guards]: a branch's guard on its operands' sizes is a guard of the trace around it,
// on the operands' sizes there (the branch is traced at the sizes of this call, so its answer is
// the outer trace's); one on operands that are not traced holds for every call and is dropped.
void lift_guards(const char* what, graph::Graph& g, const Tensors& operands, const Loc& loc) {
  for (SymGuard& guard : g.guards) {
    auto outer = [&](int v, int d, const SymInt&) -> SymInt {
      for (size_t i = 0; i < g.inputs.size(); ++i)
        if (g.inputs[i] == v) return sym_size(operands[i], d);
      fail(what, loc,
           "the branch {} {} at {}, a size of a value computed inside it, which cannot be "
           "checked before a call; use the size of an operand (or work outside the branch), or "
           "Tensor::dim_size where the size is static",
           guard.converted ? "converts to a number" : "compares", guard.format(), guard.where);
    };
    guard.a = guard.a.map_leaves(outer);
    guard.b = guard.b.map_leaves(outer);
    if (guard.a.is_symbolic() || guard.b.is_symbolic()) kiln::detail::record_sym_guard(guard);
  }
  g.guards.clear();
}

}  // namespace

// One branch traced into a subgraph on stand-ins shaped like `operands`, its captures made
// inputs (returned) and its sizes erased.
std::shared_ptr<const graph::Graph> graph::detail::trace_branch(const char* what, const Branch& fn,
                                                                const Tensors& operands,
                                                                Tensors& extra, const Loc& loc) {
  graph::Tracer tracer(what);
  Tensors ins;
  for (size_t i = 0; i < operands.size(); ++i)
    ins.push_back(tracer.add_input(operands[i], fmt::format("operand{}", i)));
  tracer.start();
  const Tensors outs = fn(ins);
  graph::Graph g = tracer.finish(outs, loc);
  lift_guards(what, g, operands, loc);
  extra = graph::detail::lift_captures(g);
  graph::detail::erase_sizes(g);
  return std::make_shared<const graph::Graph>(std::move(g));
}

Tensors cond(const Tensor& pred, const Branch& then_fn, const Branch& else_fn,
             const Tensors& operands, const Loc& loc) {
  if (!then_fn || !else_fn) fail("cond", loc, "expected two callables, but got an empty one");
  check_defined("cond", "operand", operands, loc);
  if (!graph::Tracer::active() || !pred.defined() || !pred.is_meta())
    return truth(pred, "cond", "a predicate", loc) ? then_fn(operands) : else_fn(operands);
  Tensors then_extra, else_extra;
  auto then_g = graph::detail::trace_branch("then", then_fn, operands, then_extra, loc);
  auto else_g = graph::detail::trace_branch("else", else_fn, operands, else_extra, loc);
  Tensors inputs{pred};
  for (const Tensor& t : operands) inputs.push_back(t);
  for (const Tensor& t : then_extra) inputs.push_back(t);
  for (const Tensor& t : else_extra) inputs.push_back(t);
  return dispatch(
      graph::detail::make_cond_op(then_g, else_g, static_cast<int64_t>(operands.size())), inputs,
      loc);
}

Tensors while_loop(const Branch& cond_fn, const Branch& body_fn, const Tensors& loop_vars,
                   int64_t max_iterations, const Loc& loc) {
  if (!cond_fn || !body_fn) fail("while_loop", loc, "expected two callables, but got an empty one");
  if (max_iterations < 0)
    fail("while_loop", loc, "expected max_iterations >= 0, but got {}", max_iterations);
  check_defined("while_loop", "loop var", loop_vars, loc);
  const bool traced =
      graph::Tracer::active() &&
      std::any_of(loop_vars.begin(), loop_vars.end(), [](const Tensor& t) { return t.is_meta(); });
  if (!traced) {
    Tensors vars = loop_vars;
    for (int64_t i = 0; i < max_iterations; ++i) {
      const Tensors p = cond_fn(vars);
      if (p.size() != 1)
        fail("while_loop", loc, "expected cond_fn to return one tensor, but it returned {}",
             p.size());
      if (!truth(p[0], "while_loop", "cond_fn's result", loc)) break;
      Tensors next = body_fn(vars);
      if (next.size() != vars.size())
        fail("while_loop", loc,
             "expected body_fn to return the {} loop vars, but it returned {} tensors", vars.size(),
             next.size());
      vars = std::move(next);
    }
    return vars;
  }
  Tensors cond_extra, body_extra;
  auto cond_g = graph::detail::trace_branch("cond", cond_fn, loop_vars, cond_extra, loc);
  auto body_g = graph::detail::trace_branch("body", body_fn, loop_vars, body_extra, loc);
  Tensors inputs = loop_vars;
  for (const Tensor& t : cond_extra) inputs.push_back(t);
  for (const Tensor& t : body_extra) inputs.push_back(t);
  return dispatch(graph::detail::make_while_op(
                      cond_g, body_g, static_cast<int64_t>(loop_vars.size()), max_iterations),
                  inputs, loc);
}

}  // namespace kiln
