#include "kiln/graph/graph.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/ops/op_factory.h"

namespace kiln::graph {

SymShape static_shape(const Shape& shape) {
  SymShape out;
  out.reserve(shape.size());
  for (int64_t s : shape) out.push_back({s, ""});
  return out;
}

std::string format_shape(const SymShape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += shape[i].is_symbolic() ? shape[i].symbol : std::to_string(shape[i].size);
  }
  return out + "]";
}

std::string SourceLine::format() const {
  if (!known()) return "?";
  const size_t slash = file.find_last_of('/');
  return fmt::format("{}:{}", slash == std::string::npos ? file : file.substr(slash + 1), line);
}

int Graph::add_value(DType dtype, SymShape shape, std::string value_name) {
  const int id = static_cast<int>(values.size());
  values.push_back({id, dtype, std::move(shape), std::move(value_name)});
  return id;
}

const Value& Graph::value(int id) const {
  KILN_INTERNAL_ASSERT(id >= 0 && static_cast<size_t>(id) < values.size(),
                       fmt::format("graph '{}' has no value %{}", name, id));
  return values[static_cast<size_t>(id)];
}

void Graph::validate(bool loaded) const {
  auto bad = [&](const std::string& what) {
    const std::string msg = fmt::format("[graph] '{}' is malformed: {}", name, what);
    if (loaded) throw Error(msg);
    throw InternalError("kiln internal error: " + msg);
  };
  std::vector<int> defined(values.size(), 0);  // 0: not yet, 1: defined
  auto in_range = [&](int id) { return id >= 0 && static_cast<size_t>(id) < values.size(); };
  auto define = [&](int id, const std::string& by) {
    if (!in_range(id)) bad(fmt::format("{} defines %{}, which is not a value", by, id));
    if (defined[static_cast<size_t>(id)]) bad(fmt::format("{} defines %{} a second time", by, id));
    defined[static_cast<size_t>(id)] = 1;
  };
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].id != static_cast<int>(i))
      bad(fmt::format("value {} is numbered %{}", i, values[i].id));
  for (int id : inputs) define(id, "an input");
  for (const Capture& c : captures) {
    define(c.value, "a capture");
    if (!c.tensor.defined()) bad(fmt::format("capture %{} has no tensor", c.value));
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    const Node& node = nodes[n];
    if (!node.op) bad(fmt::format("node {} has no op", n));
    const std::string what = fmt::format("node {} ({})", n, node.op->name());
    if (const OpDefinition* def = find_op_definition(node.op->name())) {
      if (!def->schema.accepts_inputs(node.inputs.size()))
        bad(fmt::format("{} has {} inputs, but the op takes {}", what, node.inputs.size(),
                        def->schema.describe()));
    }
    for (int id : node.inputs) {
      if (!in_range(id)) bad(fmt::format("{} reads %{}, which is not a value", what, id));
      if (!defined[static_cast<size_t>(id)])
        bad(fmt::format("{} reads %{} before it is defined", what, id));
    }
    const nlohmann::json attrs = node.sym_attrs.empty() ? nlohmann::json() : node.op->attrs();
    for (const SymAttr& s : node.sym_attrs) {
      nlohmann::json::json_pointer ptr;
      try {
        ptr = nlohmann::json::json_pointer(s.path);
      } catch (const nlohmann::json::exception&) {
        bad(fmt::format("{} has the symbolic attr '{}', which is not a JSON pointer", what,
                        s.path));
      }
      if (!attrs.contains(ptr) || !attrs.at(ptr).is_number())
        bad(fmt::format("{} has the symbolic attr '{}', which is not a number in its attrs {}",
                        what, s.path, attrs.dump()));
      if (!s.value.is_symbolic())
        bad(fmt::format("{}'s symbolic attr '{}' is the plain number {}", what, s.path,
                        s.value.hint()));
      s.value.for_each_leaf([&](int v, int d) {
        if (!in_range(v) || !defined[static_cast<size_t>(v)])
          bad(
              fmt::format("{}'s symbolic attr '{}' reads the size of %{}, which is not defined "
                          "before the node",
                          what, s.path, v));
        if (d < 0 || static_cast<size_t>(d) >= values[static_cast<size_t>(v)].shape.size())
          bad(fmt::format("{}'s symbolic attr '{}' reads dim {} of %{}, which has rank {}", what,
                          s.path, d, v, values[static_cast<size_t>(v)].shape.size()));
      });
    }
    for (int id : node.outputs)
      if (id != kNoValue) define(id, what);
  }
  for (int id : outputs)
    if (!in_range(id) || !defined[static_cast<size_t>(id)])
      bad(fmt::format("output %{} is not defined", id));
  for (const SymGuard& guard : guards)
    for (const SymInt* side : {&guard.a, &guard.b})
      side->for_each_leaf([&](int v, int d) {
        // A trace's own guards may read any value until trace_symbolic folds them; a loaded
        // graph's must read its inputs, which run() checks before the first node.
        const bool input = std::find(inputs.begin(), inputs.end(), v) != inputs.end();
        if (!in_range(v) || (loaded && !input) || d < 0 ||
            static_cast<size_t>(d) >= values[static_cast<size_t>(v)].shape.size())
          bad(fmt::format("the guard {} reads dim {} of %{}, which is not a graph input's dim",
                          guard.format(), d, v));
      });
}

namespace {

// Note [symbolic attrs]: the ops rebuilt for recent calls, per thread (no lock on the hot path),
// by the node's op and the evaluated attrs: a graph called at a few sizes rebuilds each op once
// per size instead of once per call. The entries hold their ops, so an op's address is never
// reused for another while it is a key; the cache is emptied when it is full.
struct RebuiltOp {
  OpPtr base;
  std::vector<int64_t> values;
  std::vector<std::string> paths;
  OpPtr op;
};
constexpr size_t kRebuiltOpCacheSize = 256;
thread_local std::vector<RebuiltOp> rebuilt_ops;

bool same_paths(const std::vector<std::string>& paths, const SymAttrs& attrs) {
  if (paths.size() != attrs.size()) return false;
  for (size_t i = 0; i < paths.size(); ++i)
    if (paths[i] != attrs[i].path) return false;
  return true;
}

}  // namespace

OpPtr op_for_call(const Node& node, const std::function<int64_t(int value, int dim)>& dim_of,
                  const Loc& loc) {
  if (node.sym_attrs.empty()) return node.op;
  std::vector<int64_t> values;
  values.reserve(node.sym_attrs.size());
  for (const SymAttr& s : node.sym_attrs) {
    try {
      values.push_back(s.value.evaluate(dim_of));
    } catch (const Error& e) {
      fail(node.op->name(), loc, "cannot compute its attr {} = {}: {}", s.path, s.value.format(),
           e.what());
    }
  }
  for (const RebuiltOp& r : rebuilt_ops)
    if (r.base == node.op && r.values == values && same_paths(r.paths, node.sym_attrs)) return r.op;
  nlohmann::json attrs = node.op->attrs();
  for (size_t i = 0; i < node.sym_attrs.size(); ++i) {
    nlohmann::json& slot = attrs[nlohmann::json::json_pointer(node.sym_attrs[i].path)];
    if (slot.is_number_float())
      slot = static_cast<double>(values[i]);
    else
      slot = values[i];
  }
  OpPtr op = make_op(node.op->name(), attrs);
  if (rebuilt_ops.size() >= kRebuiltOpCacheSize) rebuilt_ops.clear();
  std::vector<std::string> paths;
  for (const SymAttr& s : node.sym_attrs) paths.push_back(s.path);
  rebuilt_ops.push_back({node.op, std::move(values), std::move(paths), op});
  return op;
}

void for_each_sym_leaf(const Node& node, const std::function<void(int value)>& f) {
  for (const SymAttr& s : node.sym_attrs) s.value.for_each_leaf([&](int v, int) { f(v); });
}

void remap_sym_leaves(Node& node, const std::function<int(int value)>& map) {
  for (SymAttr& s : node.sym_attrs)
    s.value = s.value.map_leaves([&](int v, int d, const SymInt& leaf) {
      const int to = map(v);
      return to == v ? leaf : SymInt::dim_of(to, d, leaf.hint());
    });
}

nlohmann::json display_attrs(const Node& node) {
  nlohmann::json attrs = node.op->attrs();
  for (const SymAttr& s : node.sym_attrs)
    attrs[nlohmann::json::json_pointer(s.path)] = "\x01" + s.value.format() + "\x01";
  return attrs;
}

std::string format_attrs(const nlohmann::json& attrs) {
  if (!attrs.is_object() || attrs.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (auto it = attrs.begin(); it != attrs.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    const nlohmann::json& v = it.value();
    // A subgraph (cond's branches, Note [control flow]) in a few words.
    if (v.is_object() && v.value("format", "") == "kiln.graph") {
      out += fmt::format("{}=<graph '{}': {} nodes>", it.key(), v.value("name", ""),
                         v.contains("nodes") ? v["nodes"].size() : 0);
      continue;
    }
    out += it.key() + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  // A symbolic attr (display_attrs) prints as its expression, without quotes.
  for (const char* marker : {"\"\\u0001", "\\u0001\"", "\x01"})
    for (size_t at; (at = out.find(marker)) != std::string::npos;)
      out.erase(at, std::string_view(marker).size());
  return out + "}";
}

namespace {
std::string typed(const Value& v) {
  return fmt::format("{}{}", dtype_name(v.dtype), format_shape(v.shape));
}
std::string ref(int id) {
  return "%" + std::to_string(id);
}
}  // namespace

std::string to_text(const Graph& g) {
  std::string out = "graph " + g.name + "(";
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Value& v = g.value(g.inputs[i]);
    out += fmt::format("{}{}{}: {}", i ? ", " : "", ref(v.id), v.name.empty() ? "" : " " + v.name,
                       typed(v));
  }
  out += ") {\n";
  for (const Capture& c : g.captures) {
    const Value& v = g.value(c.value);
    out += fmt::format("  capture {}{}: {}\n", ref(v.id), v.name.empty() ? "" : " " + v.name,
                       typed(v));
  }
  for (const SymGuard& guard : g.guards)
    out += fmt::format("  guard {} is {}  # {}\n", guard.format(), guard.result, guard.where);
  for (const Node& n : g.nodes) {
    std::string lhs, types;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const bool none = n.outputs[i] == kNoValue;
      lhs += (i ? ", " : "") + (none ? std::string("_") : ref(n.outputs[i]));
      types += (i ? ", " : "") + (none ? std::string("none") : typed(g.value(n.outputs[i])));
    }
    std::string args;
    for (size_t i = 0; i < n.inputs.size(); ++i) args += (i ? ", " : "") + ref(n.inputs[i]);
    const std::string attrs = format_attrs(display_attrs(n));
    out += fmt::format("  {}{}{}({}){} : {}", lhs, lhs.empty() ? "" : " = ", n.op->name(), args,
                       attrs.empty() ? "" : " " + attrs, types);
    if (n.where.known()) out += "  # " + n.where.format();
    out += "\n";
  }
  std::string rets;
  for (size_t i = 0; i < g.outputs.size(); ++i) rets += (i ? ", " : "") + ref(g.outputs[i]);
  out += "  return " + rets + "\n}\n";
  return out;
}

}  // namespace kiln::graph
