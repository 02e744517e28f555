#include "kiln/graph/executor.h"

#include <fmt/format.h>
#include <algorithm>
#include <limits>

#include "kiln/core/allocator.h"
#include "kiln/core/rng.h"
#include "kiln/graph/memory_planner.h"
#include "kiln/graph/symbolic.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/dispatcher.h"

namespace kiln::graph {

std::vector<std::pair<std::string, int64_t>> bind_symbols(const Graph& g,
                                                          const std::vector<Tensor>& inputs,
                                                          const Loc& loc) {
  const std::string what = "graph '" + g.name + "'";
  if (inputs.size() != g.inputs.size())
    fail(what, loc, "expected {} inputs, but got {}", g.inputs.size(), inputs.size());
  std::vector<std::pair<std::string, int64_t>> symbols;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = g.value(g.inputs[i]);
    const Tensor& t = inputs[i];
    const std::string label =
        v.name.empty() ? fmt::format("input {}", i) : fmt::format("input {} '{}'", i, v.name);
    const std::string expected = fmt::format("{}{}", dtype_name(v.dtype), format_shape(v.shape));
    if (!t.defined()) fail(what, loc, "{} is undefined; expected {}", label, expected);
    if (t.dtype() != v.dtype || t.dim() != static_cast<int64_t>(v.shape.size()))
      fail(what, loc, "{} expected {}, but got {}", label, expected, t.describe());
    for (size_t d = 0; d < v.shape.size(); ++d) {
      const Dim& dim = v.shape[d];
      const int64_t size = t.shape()[d];
      if (!dim.is_symbolic()) {
        if (size != dim.size)
          fail(what, loc, "{} expected {}, but got {} (dim {} must be {})", label, expected,
               t.describe(), d, dim.size);
        continue;
      }
      auto it = std::find_if(symbols.begin(), symbols.end(),
                             [&](const auto& s) { return s.first == dim.symbol; });
      if (it == symbols.end())
        symbols.emplace_back(dim.symbol, size);
      else if (it->second != size)
        fail(what, loc, "{} has {} = {} (dim {}), but an earlier input has {} = {}; got {}", label,
             dim.symbol, size, d, dim.symbol, it->second, t.describe());
    }
  }
  return symbols;
}

namespace {

// Note [size guards]: what the trace assumed of the sizes must hold for this call.
void check_guards(const Graph& g, const std::vector<Tensor>& inputs,
                  const std::vector<std::pair<std::string, int64_t>>& symbols, const Loc& loc) {
  const SymGuard* guard = broken_guard(g, inputs);
  if (!guard) return;
  std::string sizes;
  for (const auto& [s, n] : symbols)
    sizes += fmt::format("{}{} = {}", sizes.empty() ? "" : ", ", s, n);
  fail("graph '" + g.name + "'", loc,
       "breaks an assumption of its trace: {}, and this call has {}; the code takes another "
       "path for these sizes: branch with kiln::cond on a tensor, keep sizes as kiln::SymInt, "
       "or trace with this dim static (graph::function retraces such a call)",
       assumption(g, *guard), sizes.empty() ? "its sizes" : sizes);
}

SymCompare negated(SymCompare c) {
  switch (c) {
    case SymCompare::kEq:
      return SymCompare::kNe;
    case SymCompare::kNe:
      return SymCompare::kEq;
    case SymCompare::kLt:
      return SymCompare::kGe;
    case SymCompare::kLe:
      return SymCompare::kGt;
    case SymCompare::kGt:
      return SymCompare::kLe;
    case SymCompare::kGe:
      return SymCompare::kLt;
  }
  return c;
}

// Adds the graph and the node to an error a node raised at run time.
[[noreturn]] void rethrow_in_node(const Graph& g, size_t index, const Node& node, const Error& e) {
  std::string where = fmt::format(" (in graph '{}', node {} '{}'", g.name, index, node.op->name());
  if (node.where.known()) where += ", traced at " + node.where.format();
  where += ")";
  if (dynamic_cast<const OutOfMemoryError*>(&e)) throw;
  throw Error(std::string(e.what()) + where);
}

}  // namespace

const SymGuard* broken_guard(const Graph& g, const std::vector<Tensor>& inputs) {
  if (g.guards.empty() || inputs.size() != g.inputs.size()) return nullptr;
  bool judged = true;  // false when the inputs do not fit the graph: run() says how
  auto dim_of = [&](int v, int d) -> int64_t {
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.inputs[i] == v) {
        const Tensor& t = inputs[i];
        if (t.defined() && d >= 0 && d < t.dim()) return t.shape()[static_cast<size_t>(d)];
        judged = false;
        return 0;
      }
    throw InternalError(fmt::format(
        "kiln internal error: graph '{}' has a guard on %{}, which is not an input", g.name, v));
  };
  for (const SymGuard& guard : g.guards) {
    const int64_t a = guard.a.evaluate(dim_of), b = guard.b.evaluate(dim_of);
    if (!judged) return nullptr;
    if (sym_compare_apply(guard.compare, a, b) != guard.result) return &guard;
  }
  return nullptr;
}

std::string assumption(const Graph& g, const SymGuard& guard) {
  const SymCompare c = guard.result ? guard.compare : negated(guard.compare);
  const std::string text =
      fmt::format("{} {} {}", size_text(g, guard.a), sym_compare_name(c), size_text(g, guard.b));
  if (guard.converted)
    return fmt::format("{} was assumed at {}, where the size is converted to a number", text,
                       guard.where);
  return fmt::format("{} was assumed at {}", text, guard.where);
}

std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs, const Loc& loc,
                        MemoryPlanner* planner) {
  const auto symbols = bind_symbols(g, inputs, loc);
  check_guards(g, inputs, symbols, loc);
  // A shape-only run (a subgraph's inference, Note [control flow]) draws nothing.
  const bool meta_run = std::any_of(inputs.begin(), inputs.end(),
                                    [](const Tensor& t) { return t.defined() && t.is_meta(); });
  // Planned memory (Note [memory planner]) for real runs that no pushed mode (a tracer) watches;
  // declared before the environment so that the run ends after every intermediate is released.
  std::unique_ptr<PlannedRun> planned;
  if (planner && !meta_run && dispatch_mode_stack().empty()) planned = planner->begin(inputs);
  std::vector<Tensor> env(g.values.size());
  for (size_t i = 0; i < inputs.size(); ++i) env[static_cast<size_t>(g.inputs[i])] = inputs[i];
  for (const Capture& c : g.captures) env[static_cast<size_t>(c.value)] = c.tensor;
  // Each intermediate is released after its last reader (Note [graph executor]).
  constexpr int kKeep = std::numeric_limits<int>::max();
  std::vector<int> last_use(g.values.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int id : g.nodes[n].inputs) last_use[static_cast<size_t>(id)] = static_cast<int>(n);
  for (int id : g.outputs) last_use[static_cast<size_t>(id)] = kKeep;
  // The sizes of every value so far, for nodes with symbolic attrs (Note [symbolic attrs]).
  const bool symbolic = std::any_of(g.nodes.begin(), g.nodes.end(),
                                    [](const Node& n) { return !n.sym_attrs.empty(); });
  std::vector<Shape> sizes(symbolic ? g.values.size() : 0);
  if (symbolic) {
    for (size_t i = 0; i < inputs.size(); ++i)
      sizes[static_cast<size_t>(g.inputs[i])] = inputs[i].shape();
    for (const Capture& c : g.captures) sizes[static_cast<size_t>(c.value)] = c.tensor.shape();
  }
  auto dim_of = [&](int v, int d) {
    const Shape& s = sizes[static_cast<size_t>(v)];
    KILN_INTERNAL_ASSERT(static_cast<size_t>(d) < s.size(), "a symbolic attr reads an unseen size");
    return s[static_cast<size_t>(d)];
  };
  std::vector<Tensor> args;
  std::vector<bool> dying;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    args.clear();
    for (int id : node.inputs) args.push_back(env[static_cast<size_t>(id)]);
    std::vector<Tensor> outs;
    try {
      const Loc& at = node.loc ? *node.loc : loc;
      OpPtr op = op_for_call(node, dim_of, at);
      if (planned) {
        dying.clear();
        for (int id : node.inputs)
          dying.push_back(last_use[static_cast<size_t>(id)] == static_cast<int>(n));
        planned->begin_node(static_cast<int>(n), overwritable_input(*op, args, dying, at));
      }
      // Fresh numbers on every run, from the default generator (Note [random effects]).
      if (op->draws_random() && !meta_run) {
        const uint64_t blocks = op->random_blocks(op->infer(args, at));
        const Generator::State s = default_generator().reserve_with_seed(blocks, at);
        op = op->at_stream(s.seed, s.offset);
      }
      outs = dispatch(op, args, at);
      if (planned) planned->end_node(outs);
    } catch (const Error& e) {
      rethrow_in_node(g, n, node, e);
    }
    if (outs.size() != node.outputs.size())
      throw InternalError(fmt::format(
          "kiln internal error: graph '{}' node {} '{}' returned {} outputs, the graph has {}",
          g.name, n, node.op->name(), outs.size(), node.outputs.size()));
    for (size_t i = 0; i < outs.size(); ++i) {
      const int id = node.outputs[i];
      if (symbolic && id != kNoValue && outs[i].defined())
        sizes[static_cast<size_t>(id)] = outs[i].shape();
      if (id != kNoValue && last_use[static_cast<size_t>(id)] > static_cast<int>(n))
        env[static_cast<size_t>(id)] = std::move(outs[i]);
    }
    args.clear();  // so that the releases below free the memory before the next node runs
    for (int id : node.inputs)
      if (last_use[static_cast<size_t>(id)] == static_cast<int>(n))
        env[static_cast<size_t>(id)] = {};
  }
  std::vector<Tensor> result;
  result.reserve(g.outputs.size());
  for (int id : g.outputs) result.push_back(env[static_cast<size_t>(id)]);
  return result;
}

}  // namespace kiln::graph
