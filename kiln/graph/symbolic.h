#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/graph/tensor_spec.h"

namespace kiln::graph {

// Note [symbolic dims]
// ~~~~~~~~~~~~~~~~~~~~
// A symbolic dim ("batch") must mean every size, 0 and 1 included, and a trace must never bake a
// size into the graph. Ops whose attrs do not hold sizes (elementwise, matmul, conv, reductions
// over static dims, reshape with -1) are shape-polymorphic already: the executor reruns infer for
// each call's sizes. Sizes read with x.size(d) are SymInts that the shape-taking APIs record as
// expressions (Note [symbolic sizes], Note [size lists]). The danger left is C++ that turns a
// dynamic size into a plain number and passes that as an attribute: `zeros(Shape{n, 2})` with
// n = x.dim_size(0), `div(x, double(x.size(0)))`. A tracer sees only the number.
//
// kiln traces twice, on meta tensors (no arithmetic, so tracing twice is cheap), giving each
// symbol a different pair of probe sizes (primes: batch 11 then 13, the next symbol 17 then 19,
// ...; large enough not to be 0 or 1 and to stand apart from typical static sizes), and diffs the
// two graphs generically, with no per-op code:
//   - the node lists must match (same ops on the same values): otherwise the code's control
//     flow or op choice depends on a size, and the trace fails naming the first node that
//     differs and its line;
//   - every node's attrs must be equal as JSON; an attr that differs depends on a dynamic dim,
//     and the trace fails with the op, the attr, both values, the symbol and the user's line,
//     suggesting -1 or making the dim static (random draws, whose seed and offset would differ,
//     are refused by the tracer before this: Note [tracer]);
//   - a value dim that is one symbol's probe in both traces is that symbol; k times it is the
//     product (printed `784*batch`); a dim that differs otherwise is printed `?`. These names
//     are for reading: the executor uses only the inputs' dims.
// Sizes computed from a traced tensor's size through kiln::SymInt (Note [symbolic sizes]) are
// recorded as expressions (Note [symbolic attrs]); the diff compares those expressions instead of
// the numbers, so a reshape to [2*batch, -1] made that way traces. The first trace is kept.
// A comparison or a conversion to a number of a size is a guard (Note [size guards] in
// kiln/core/sym_int.h): one answered differently at the two probes fails the trace at its line;
// one answered the same is kept and checked before every call (`if (batch == 1)` traced at 11 and
// 13 assumes batch != 1, and graph::function retraces a call with batch 1). Limit: a number
// computed from a size without kiln::SymInt (Tensor::dim_size) that the probes give the same by
// coincidence is not seen.
// Note [symbolic attrs] (graph.h): after the diff, each leaf of a symbolic attr that is a static
// dim becomes its size, and an attr left without a symbolic leaf is a plain attr again.
void fold_static_sym_attrs(Graph& g);

// `s` with each leaf that is a symbolic dim written as its symbol ("batch * 2"), else
// "size(%3, 0)".
std::string size_text(const Graph& g, const SymInt& s);

using TraceFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
Graph trace_symbolic(const std::string& name, const TraceFn& fn,
                     const std::vector<TensorSpec>& signature, const Loc& loc);

}  // namespace kiln::graph
