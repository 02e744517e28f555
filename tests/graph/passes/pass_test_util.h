#pragma once
// Helpers for the pass tests: a graph traced without optimization, one pass applied, and the
// two graphs run on the same inputs (Note [graph passes]).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kiln/graph/executor.h"
#include "kiln/graph/function.h"
#include "kiln/graph/passes/pass.h"
#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::graph::test {

using Tensors = std::vector<Tensor>;

// fn traced with a signature and no optimization.
inline Graph raw_trace(const Function::Fn& fn, std::vector<TensorSpec> signature) {
  FunctionOptions options;
  options.name = "f";
  options.optimize = false;
  return *function(fn, std::move(signature), options).graphs()[0];
}

// How many nodes run the op `name`.
inline int count_nodes(const Graph& g, const std::string& name) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(),
                                        [&](const Node& n) { return name == n.op->name(); }));
}

// Both graphs on the same inputs give bit-identical outputs.
inline void expect_same_results(const Graph& before, const Graph& after, const Tensors& inputs) {
  const Tensors a = run(before, inputs), b = run(after, inputs);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) kiln::test::expect_bit_identical(b[i], a[i]);
}

// The text of a graph, for a failure message: before and after.
inline std::string both(const Graph& before, const Graph& after) {
  return "before:\n" + to_text(before) + "after:\n" + to_text(after);
}

}  // namespace kiln::graph::test
