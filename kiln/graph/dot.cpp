#include "kiln/graph/dot.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <vector>

extern char** environ;

namespace kiln::graph {

namespace {

// A DOT string literal's contents: quotes and backslashes escaped, lines joined by \n.
std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string shortened(std::string s, size_t max) {
  if (s.size() <= max) return s;
  s.resize(max - 3);
  return s + "...";
}

std::string typed(const Value& v) {
  return fmt::format("{}{}", dtype_name(v.dtype), format_shape(v.shape));
}

}  // namespace

std::string to_dot(const Graph& g) {
  std::string out = fmt::format(
      "digraph \"{}\" {{\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n",
      escaped(g.name));
  // Which DOT node holds each value: an input or capture node, or the op node making it.
  std::vector<std::string> source(g.values.size());
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Value& v = g.value(g.inputs[i]);
    source[static_cast<size_t>(v.id)] = fmt::format("v{}", v.id);
    out += fmt::format(
        "  v{} [label=\"{}\\n{}\", shape=ellipse, style=filled, fillcolor=\"#dbeafe\"];\n", v.id,
        escaped(v.name.empty() ? fmt::format("input {}", i) : v.name), escaped(typed(v)));
  }
  for (const Capture& c : g.captures) {
    const Value& v = g.value(c.value);
    source[static_cast<size_t>(v.id)] = fmt::format("v{}", v.id);
    out += fmt::format(
        "  v{} [label=\"{}\\n{}\", shape=box, style=\"rounded,filled\", fillcolor=\"#eeeeee\", "
        "fontsize=8];\n",
        v.id, escaped(v.name.empty() ? fmt::format("%{}", v.id) : v.name), escaped(typed(v)));
  }
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    std::string label = node.op->name();
    const std::string attrs = format_attrs(display_attrs(node));
    if (!attrs.empty()) label += "\n" + shortened(attrs, 60);
    if (node.where.known()) label += "\n" + node.where.format();
    const bool effect = node.op->mutates() != 0 || node.op->draws_random();
    out += fmt::format("  n{} [label=\"{}\", shape=box, style=filled, fillcolor=\"{}\"];\n", n,
                       escaped(label), effect ? "#fed7aa" : "#ffffff");
    for (int id : node.inputs) {
      const std::string& from = source[static_cast<size_t>(id)];
      if (!from.empty())
        out += fmt::format("  {} -> n{} [label=\"{}\"];\n", from, n, escaped(typed(g.value(id))));
    }
    for (int id : node.outputs)
      if (id != kNoValue) source[static_cast<size_t>(id)] = fmt::format("n{}", n);
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int id = g.outputs[i];
    out += fmt::format(
        "  out{} [label=\"output {}\", shape=ellipse, style=filled, fillcolor=\"#dcfce7\"];\n", i,
        i);
    out += fmt::format("  {} -> out{} [label=\"{}\"];\n", source[static_cast<size_t>(id)], i,
                       escaped(typed(g.value(id))));
  }
  return out + "}\n";
}

std::string render_svg(const std::string& dot_file, const std::string& svg_file) {
  std::vector<std::string> args = {"dot", "-Tsvg", "-o", svg_file, dot_file};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "dot", nullptr, nullptr, argv.data(), environ);
  if (rc != 0)
    return fmt::format("cannot run Graphviz's `dot` ({}); install the graphviz package",
                       std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return fmt::format("waiting for `dot` failed: {}", std::strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fmt::format("`dot -Tsvg {}` failed (exit status {})", dot_file,
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return "";
}

}  // namespace kiln::graph
