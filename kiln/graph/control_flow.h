#pragma once
// kiln::cond and kiln::while_loop (Note [control flow]).
#include <functional>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// Note [control flow]
// ~~~~~~~~~~~~~~~~~~~
// A traced graph cannot branch on data in C++ (Note [value reads]); these two functions carry
// the branch into the graph, as tf.cond / tf.while_loop and torch.cond do.
//   Eagerly they just run: cond reads pred and calls one branch, while_loop calls cond_fn and
//   body_fn until cond_fn says false or max_iterations bodies ran. The tape records the ops the
//   branch ran, so both are differentiable in eager.
//   While tracing, each function (then_fn and else_fn; cond_fn and body_fn) is traced into a
//   subgraph of its own, on meta stand-ins of the operands, and the call becomes one node (op
//   "cond" or "while_loop") whose attrs hold the subgraphs as JSON (Note [graph JSON]), so the
//   node rebuilds from (name, attrs) like every op. Tensors a branch reads without taking them as
//   operands (parameters, values of the enclosing function) become extra inputs of the node, so a
//   subgraph has no captures. Subgraph values keep no sizes (their dims are symbols, sized when
//   the node runs), so one node serves every size of a symbolic dim.
//   The node's infer runs the subgraphs on meta tensors: the two branches must return the same
//   number of tensors with equal dtypes and shapes, and a loop body must return its loop vars'
//   dtypes and shapes (shape invariance); a mismatch fails the trace naming the outputs.
//   The node's kernel runs the chosen subgraph (the executor, Note [graph executor]).
//   Gradients: cond's vjp is itself a cond over the two branches' gradients (each branch replays
//   its subgraph and differentiates it), so a graph with a cond is differentiable, in eager runs
//   of the graph and in traces of its backward. In an eager run the taken branch's gradients are
//   computed directly, so an input only the other branch reads gets no gradient, as in eager code
//   (undefined; kiln::grad's allow_unused); in a traced backward both branches must return one
//   shape, so there it gets zeros. A traced while_loop has no gradient yet (its vjp
//   would need the iterates of every step): backward through one is an error naming the loop's
//   line; eager while_loop is differentiable.
using Branch = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// pred: a bool or number tensor of one element. Returns then_fn(operands) when it is true (not
// 0), else else_fn(operands).
std::vector<Tensor> cond(const Tensor& pred, const Branch& then_fn, const Branch& else_fn,
                         const std::vector<Tensor>& operands, const Loc& loc = Loc::current());

// vars = loop_vars; while (iterations < max_iterations && cond_fn(vars)[0]) vars = body_fn(vars);
// cond_fn returns one bool or number tensor of one element; body_fn returns tensors of the loop
// vars' dtypes and shapes. max_iterations >= 0 bounds the loop.
std::vector<Tensor> while_loop(const Branch& cond_fn, const Branch& body_fn,
                               const std::vector<Tensor>& loop_vars, int64_t max_iterations,
                               const Loc& loc = Loc::current());

}  // namespace kiln
