#include "kiln/graph/serialize.h"

#include <fmt/format.h>

#include <limits>

#include "kiln/ops/op_factory.h"

namespace kiln::graph {

namespace {

nlohmann::json dim_json(const Dim& d) {
  if (!d.is_symbolic()) return d.size;
  return {{"symbol", d.symbol}, {"traced", d.size}};
}

[[noreturn]] void bad(const std::string& what) {
  throw Error("[graph] cannot load the graph JSON: " + what);
}

const nlohmann::json& field(const nlohmann::json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) bad(fmt::format("{} is not an object", where));
  auto it = obj.find(key);
  if (it == obj.end()) bad(fmt::format("{} has no \"{}\"", where, key));
  return *it;
}

int64_t integer(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_integer()) bad(fmt::format("{} is not an integer: {}", where, v.dump()));
  return v.get<int64_t>();
}

std::string text(const nlohmann::json& v, const std::string& where) {
  if (!v.is_string()) bad(fmt::format("{} is not a string: {}", where, v.dump()));
  return v.get<std::string>();
}

const nlohmann::json& array(const nlohmann::json& v, const std::string& where) {
  if (!v.is_array()) bad(fmt::format("{} is not an array", where));
  return v;
}

std::vector<int> ids(const nlohmann::json& v, const std::string& where) {
  std::vector<int> out;
  for (size_t i = 0; i < array(v, where).size(); ++i) {
    const int64_t id = integer(v[i], fmt::format("{}[{}]", where, i));
    if (id < kNoValue || id > std::numeric_limits<int>::max())
      bad(fmt::format("{}[{}] is not a value id: {}", where, i, id));
    out.push_back(static_cast<int>(id));
  }
  return out;
}

DType parse_dtype(const nlohmann::json& v, const std::string& where) {
  const std::string name = text(v, where);
  if (std::optional<DType> dt = dtype_from_name(name)) return *dt;
  bad(fmt::format("{} names no dtype: \"{}\"", where, name));
}

Dim parse_dim(const nlohmann::json& v, const std::string& where) {
  if (v.is_number_integer()) {
    const int64_t size = v.get<int64_t>();
    if (size < 0) bad(fmt::format("{} is a negative size: {}", where, size));
    return {size, ""};
  }
  Dim d{integer(field(v, "traced", where), where + ".traced"),
        text(field(v, "symbol", where), where + ".symbol")};
  if (d.symbol.empty()) bad(fmt::format("{} has an empty symbol", where));
  if (d.size < 0) bad(fmt::format("{}.traced is a negative size: {}", where, d.size));
  return d;
}

}  // namespace

nlohmann::json to_json(const Graph& g) {
  nlohmann::json values = nlohmann::json::array();
  for (const Value& v : g.values) {
    nlohmann::json shape = nlohmann::json::array();
    for (const Dim& d : v.shape) shape.push_back(dim_json(d));
    values.push_back({{"dtype", dtype_name(v.dtype)}, {"shape", shape}, {"name", v.name}});
  }
  nlohmann::json captures = nlohmann::json::array();
  for (const Capture& c : g.captures) captures.push_back({{"value", c.value}});
  nlohmann::json nodes = nlohmann::json::array();
  bool symbolic = false;
  for (const Node& n : g.nodes) {
    nlohmann::json node = {{"op", n.op->name()},          {"attrs", n.op->attrs()},
                           {"inputs", n.inputs},          {"outputs", n.outputs},
                           {"file", n.where.file},        {"line", n.where.line},
                           {"function", n.where.function}};
    if (!n.sym_attrs.empty()) {
      symbolic = true;
      nlohmann::json sym = nlohmann::json::array();
      for (const SymAttr& s : n.sym_attrs)
        sym.push_back({{"path", s.path}, {"value", s.value.to_json()}});
      node["sym_attrs"] = std::move(sym);
    }
    nodes.push_back(std::move(node));
  }
  nlohmann::json guards = nlohmann::json::array();
  for (const SymGuard& guard : g.guards) {
    nlohmann::json j = {{"compare", sym_compare_name(guard.compare)},
                        {"a", guard.a.to_json()},
                        {"b", guard.b.to_json()},
                        {"result", guard.result},
                        {"where", guard.where}};
    if (guard.converted) j["converted"] = true;
    guards.push_back(std::move(j));
  }
  const int version =
      symbolic || !guards.empty() ? kGraphFormatVersion : kGraphFormatVersionWithoutSymAttrs;
  nlohmann::json doc = {{"format", "kiln.graph"}, {"version", version}, {"name", g.name},
                        {"values", values},       {"inputs", g.inputs}, {"captures", captures},
                        {"outputs", g.outputs},   {"nodes", nodes}};
  if (!guards.empty()) doc["guards"] = std::move(guards);
  return doc;
}

Graph from_json(const nlohmann::json& doc, const std::vector<Tensor>& captures) {
  if (text(field(doc, "format", "the document"), "format") != "kiln.graph")
    bad("\"format\" is not \"kiln.graph\"");
  const int64_t version = integer(field(doc, "version", "the document"), "version");
  if (version != kGraphFormatVersion && version != kGraphFormatVersionWithoutSymAttrs)
    bad(fmt::format("version {} is not supported (this kiln reads versions {} and {})", version,
                    kGraphFormatVersionWithoutSymAttrs, kGraphFormatVersion));
  Graph g;
  g.name = text(field(doc, "name", "the document"), "name");
  const nlohmann::json& values = array(field(doc, "values", "the document"), "values");
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string where = fmt::format("values[{}]", i);
    SymShape shape;
    const nlohmann::json& dims = array(field(values[i], "shape", where), where + ".shape");
    for (size_t d = 0; d < dims.size(); ++d)
      shape.push_back(parse_dim(dims[d], fmt::format("{}.shape[{}]", where, d)));
    g.add_value(parse_dtype(field(values[i], "dtype", where), where + ".dtype"), std::move(shape),
                text(field(values[i], "name", where), where + ".name"));
  }
  g.inputs = ids(field(doc, "inputs", "the document"), "inputs");
  g.outputs = ids(field(doc, "outputs", "the document"), "outputs");
  const nlohmann::json& caps = array(field(doc, "captures", "the document"), "captures");
  if (caps.size() != captures.size())
    bad(fmt::format("the graph captures {} tensors, but {} were given", caps.size(),
                    captures.size()));
  for (size_t i = 0; i < caps.size(); ++i) {
    const std::string where = fmt::format("captures[{}]", i);
    const int64_t id = integer(field(caps[i], "value", where), where + ".value");
    if (id < 0 || static_cast<size_t>(id) >= g.values.size())
      bad(fmt::format("{}.value {} is not a value", where, id));
    const Value& v = g.values[static_cast<size_t>(id)];
    const Tensor& t = captures[i];
    if (!t.defined()) bad(fmt::format("the tensor given for {} is undefined", where));
    if (t.dtype() != v.dtype || static_shape(t.shape()) != v.shape)
      bad(fmt::format("{} (%{}{}) is {}{}, but the tensor given is {}", where, id,
                      v.name.empty() ? "" : " " + v.name, dtype_name(v.dtype),
                      format_shape(v.shape), t.describe()));
    g.captures.push_back({static_cast<int>(id), t});
  }
  const nlohmann::json& nodes = array(field(doc, "nodes", "the document"), "nodes");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string where = fmt::format("nodes[{}]", i);
    const nlohmann::json& n = nodes[i];
    Node node;
    const std::string op = text(field(n, "op", where), where + ".op");
    const nlohmann::json& attrs = field(n, "attrs", where);
    try {
      node.op = make_op(op, attrs);
    } catch (const Error& e) {
      bad(fmt::format("{} ('{}'): {}", where, op, e.what()));
    }
    node.inputs = ids(field(n, "inputs", where), where + ".inputs");
    node.outputs = ids(field(n, "outputs", where), where + ".outputs");
    const int64_t line = integer(field(n, "line", where), where + ".line");
    if (line < 0 || line > std::numeric_limits<uint32_t>::max())
      bad(fmt::format("{}.line is out of range: {}", where, line));
    node.where = {text(field(n, "file", where), where + ".file"), static_cast<uint32_t>(line),
                  text(field(n, "function", where), where + ".function")};
    if (n.is_object() && n.contains("sym_attrs")) {
      if (version < kGraphFormatVersion)
        bad(fmt::format("{} has \"sym_attrs\", which version {} does not have", where, version));
      const nlohmann::json& sym = array(n["sym_attrs"], where + ".sym_attrs");
      for (size_t k = 0; k < sym.size(); ++k) {
        const std::string at = fmt::format("{}.sym_attrs[{}]", where, k);
        SymAttr s{text(field(sym[k], "path", at), at + ".path"), SymInt()};
        try {
          s.value = SymInt::from_json(field(sym[k], "value", at), at + ".value");
        } catch (const Error& e) {
          bad(e.what());
        }
        node.sym_attrs.push_back(std::move(s));
      }
    }
    g.nodes.push_back(std::move(node));
  }
  if (doc.contains("guards")) {
    if (version < kGraphFormatVersion)
      bad(fmt::format("the document has \"guards\", which version {} does not have", version));
    const nlohmann::json& guards = array(doc["guards"], "guards");
    for (size_t k = 0; k < guards.size(); ++k) {
      const std::string at = fmt::format("guards[{}]", k);
      SymGuard guard;
      const std::string compare = text(field(guards[k], "compare", at), at + ".compare");
      bool known = false;
      for (SymCompare c : {SymCompare::kEq, SymCompare::kNe, SymCompare::kLt, SymCompare::kLe,
                           SymCompare::kGt, SymCompare::kGe})
        if (compare == sym_compare_name(c)) guard.compare = c, known = true;
      if (!known) bad(fmt::format("{}.compare is not a comparison: \"{}\"", at, compare));
      try {
        guard.a = SymInt::from_json(field(guards[k], "a", at), at + ".a");
        guard.b = SymInt::from_json(field(guards[k], "b", at), at + ".b");
      } catch (const Error& e) {
        bad(e.what());
      }
      const nlohmann::json& result = field(guards[k], "result", at);
      if (!result.is_boolean()) bad(fmt::format("{}.result is not a boolean", at));
      guard.result = result.get<bool>();
      guard.where = text(field(guards[k], "where", at), at + ".where");
      if (guards[k].contains("converted")) {
        const nlohmann::json& converted = guards[k]["converted"];
        if (!converted.is_boolean()) bad(fmt::format("{}.converted is not a boolean", at));
        guard.converted = converted.get<bool>();
      }
      g.guards.push_back(std::move(guard));
    }
  }
  g.validate(/*loaded=*/true);
  return g;
}

}  // namespace kiln::graph
