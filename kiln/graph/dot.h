#pragma once
// A traced graph as a Graphviz drawing (Note [graph drawing]).
#include <string>

#include "kiln/graph/graph.h"

namespace kiln::graph {

// Note [graph drawing]
// ~~~~~~~~~~~~~~~~~~~~
// to_dot writes a graph in Graphviz's DOT language, top to bottom: inputs as blue ellipses,
// captures (parameters, buffers) as grey boxes with their names, one box per node with its op,
// its attrs (shortened) and its source line, nodes with effects (Note [effects], Note [random
// effects]) in orange, and the outputs at the bottom. Each edge is labelled with the value's
// dtype and shape, symbols included (float32[batch, 32, 28, 28]). render_svg runs Graphviz's
// `dot` (Debian's graphviz package) on a DOT file; kiln does not need it for anything else.
std::string to_dot(const Graph& g);

// Runs `dot -Tsvg -o svg_file dot_file`. Returns an empty string on success, else why it failed
// (dot not installed, dot's exit status).
std::string render_svg(const std::string& dot_file, const std::string& svg_file);

}  // namespace kiln::graph
