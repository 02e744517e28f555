#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph {

// Note [graph JSON]
// ~~~~~~~~~~~~~~~~~
// A graph as a versioned JSON document: {"format": "kiln.graph", "version": 1, "name", "values"
// (dtype, shape, name), "inputs", "captures" (value and name), "outputs", "nodes" (op, attrs,
// inputs, outputs, file, line, function)}. A dim is a number or {"symbol": "batch", "traced": 7}.
// Captured tensors are referenced, not stored: the document says which values are captures and
// what they look like, and the loader binds the caller's tensors to them in order (a saved-model
// bundle stores the tensors beside the graph, as safetensors). Loading validates everything
// (format, version, every op through its factory, value references, the capture tensors'
// dtypes and shapes): a bad document is a kiln::Error naming what is wrong, never a crash.
// to_json(from_json(d)) == d for every document to_json wrote. A control-flow node's attrs hold
// its subgraphs as documents of their own (Note [control flow]), checked the same way when the
// op is rebuilt.
// Version 2 adds a node's symbolic attrs (Note [symbolic attrs]): "sym_attrs": [{"path":
// "/shape/0", "value": {"dim": [0, 0]}}, ...]. A graph without them is written as version 1, so
// older kiln reads it; one with them is version 2, which older kiln refuses instead of running
// the traced sizes. Version 2 also holds the graph's size guards (Note [size guards]): "guards":
// [{"compare": "==", "a": expr, "b": expr, "result": false, "where": "model.cpp:12"}], with
// "converted": true on a guard a conversion to a number made (optional). Both versions are read.
constexpr int kGraphFormatVersion = 2;
constexpr int kGraphFormatVersionWithoutSymAttrs = 1;

nlohmann::json to_json(const Graph& g);
Graph from_json(const nlohmann::json& doc, const std::vector<Tensor>& captures);

}  // namespace kiln::graph
