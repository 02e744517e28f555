#pragma once
// The graph optimizer: a fixed pipeline of rewrite passes over a traced graph.
#include <functional>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph {

// Note [graph passes]
// ~~~~~~~~~~~~~~~~~~~
// optimize(g) returns a copy of g rewritten by the passes below, in this order, repeated until a
// round changes nothing (at most a few rounds); each pass lives in its own file under
// kiln/graph/passes/ and keeps the rules of Note [pass soundness]:
//   simplify   algebraic identities: x*1, x/1, x-0, x+0 (Note [x + 0]), a permute of a permute,
//              a view or reshape of a view or reshape, a permute or view that changes nothing
//   cse        common subexpressions: two pure nodes with the same op (name + attrs) on the same
//              inputs become one
//   conv_bn    with `freeze` only: conv2d -> batch_norm_eval (-> add residual) (-> relu), as
//   separate
//              Conv2d/BatchNorm2d/ReLU modules trace, becomes conv_bn_fold + conv2d_affine, the
//              ops nn::conv_bn emits (Note [conv-bn fold]); not bit for bit (the fold rounds
//              differently, ~1e-6 relative)
//   linear     with `freeze` only: a float32 linear (-> relu, when the relu is its only reader)
//              becomes fused_linear, one oneDNN matmul with the bias and the relu as post-ops;
//              not bit for bit either (~1e-6 relative)
//   fold       constant folding: a pure node whose inputs are all constants runs once, at compile
//              time, and becomes a constant. Constants are the outputs of factories without inputs
//              (the scalars of expressions); with `freeze`, captures (parameters, buffers) are
//              constants too, as torch.jit.freeze makes them: an inference graph then folds its
//              weight preprocessing (conv-bn folds, transposes), but no longer sees a later
//              optimizer step or load_state_dict, and no gradient reaches a frozen capture
//   dce        dead code: nodes none of whose outputs is read and that have no effect
//   fuse       elementwise fusion: a chain of unary and binary elementwise ops (those with an
//              elementwise tile, Note [elementwise tiles]) becomes one fused_elementwise node
//              that reads its inputs once and writes its outputs once, bit for bit the chain's
// and then, once, after the rounds:
//   layout     a float32 image input that a training convolution reads is laid out
//              channels-last once, at the graph's edge, where the CPU's convolutions are faster
//              on NHWC (AVX-512), so the convolutions, batch norms and elementwise ops between run
//              without reorders (Note [layout pass]); not bit for bit (~1e-7 relative)
//   hoist      a node that writes memory (an optimizer update) moves up to just after the last
//              node it depends on, so that a training step's gradients die as soon as they are
//              applied (Note [hoisting writes]); bit for bit
//   remat      rematerialization: a memory-bound value alive across the graph's memory peak (a
//              training graph's activations, kept for the backward pass) is computed again before
//              its first read after the peak, when that lowers the peak (Note
//              [rematerialization]); bit for bit, since the copies run the same ops
// Any pass can be skipped by name (OptimizeOptions::skip, or the environment variable
// KILN_GRAPH_SKIP_PASSES=cse,fold) to bisect a wrong result; an unknown name is an error listing
// the passes. The result is validated, and outputs stay exactly what the unoptimized graph
// computes (bit for bit: every rewrite runs the same kernels on the same values, or none), but
// for conv_bn's folding and linear's post-ops in a frozen graph and layout's kernels.
struct OptimizeOptions {
  bool freeze = false;
  std::vector<std::string> skip = {};
  // Called after each pass that changed the graph (tests, `kiln graph --passes`).
  std::function<void(const std::string& pass, const Graph& after)> after_pass = nullptr;
};

struct PassStat {
  std::string pass;
  int rounds_changed = 0;  // rounds in which it changed the graph
  int nodes_removed = 0;   // net, over all rounds
  double ms = 0.0;         // total time spent in it
};

struct OptimizeReport {
  int nodes_before = 0, nodes_after = 0;
  int rounds = 0;
  std::vector<PassStat> passes;  // in pipeline order, skipped ones left out
  std::vector<std::string> skipped;
  std::string format() const;  // one line per pass
};

// The pass names in pipeline order.
const std::vector<std::string>& pass_names();

Graph optimize(const Graph& g, const OptimizeOptions& options = {},
               OptimizeReport* report = nullptr, const Loc& loc = Loc::current());

namespace passes {
// The passes one by one (each returns whether it changed the graph).
bool simplify(Graph& g);
bool eliminate_common_subexpressions(Graph& g);
bool fuse_conv_bn(Graph& g, bool freeze);
bool fuse_linear(Graph& g, bool freeze);
bool fold_constants(Graph& g, bool freeze);
bool eliminate_dead_code(Graph& g);
bool fuse_elementwise(Graph& g);
bool assign_layouts(Graph& g);
bool hoist_writes(Graph& g);
bool rematerialize(Graph& g);
}  // namespace passes

}  // namespace kiln::graph
