#include "kiln/ops/op_factory.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

namespace kiln {

namespace {

struct Table {
  std::mutex mu;
  std::map<std::string, OpDefinition> defs;
  std::vector<std::string> duplicates;
};

Table& table() {
  static auto* t = new Table();
  return *t;
}

const char* type_name(const nlohmann::json& v) {
  return v.type_name();
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string suf(suffix);
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

Attrs::Attrs(std::string op, const nlohmann::json& attrs) : op_(std::move(op)), attrs_(attrs) {
  if (!attrs_.is_object())
    throw Error(fmt::format("[make_op] expected the attrs of '{}' to be a JSON object, but got {}",
                            op_, attrs_.dump()));
}

void Attrs::fail(const char* key, const std::string& what) const {
  throw Error(fmt::format("[make_op] op '{}': attribute '{}' {} (attrs {})", op_, key, what,
                          attrs_.dump()));
}

bool Attrs::has(const char* key) const {
  return attrs_.contains(key);
}

const nlohmann::json& Attrs::at(const char* key) const {
  auto it = attrs_.find(key);
  if (it == attrs_.end()) fail(key, "is missing");
  return *it;
}

int64_t Attrs::i(const char* key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number_integer())
    fail(key, fmt::format("must be an integer, but is a {}", type_name(v)));
  return v.get<int64_t>();
}

uint64_t Attrs::u64(const char* key) const {
  const nlohmann::json& v = at(key);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  fail(key, fmt::format("must be a non-negative integer, but is {}", v.dump()));
}

double Attrs::f(const char* key) const {
  const nlohmann::json& v = at(key);
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  fail(key, fmt::format("must be a number (or \"nan\", \"inf\", \"-inf\"), but is {}", v.dump()));
}

bool Attrs::b(const char* key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_boolean()) fail(key, fmt::format("must be a bool, but is a {}", type_name(v)));
  return v.get<bool>();
}

std::string Attrs::s(const char* key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_string()) fail(key, fmt::format("must be a string, but is a {}", type_name(v)));
  return v.get<std::string>();
}

std::vector<int64_t> Attrs::ints(const char* key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_array())
    fail(key, fmt::format("must be an array of integers, but is a {}", type_name(v)));
  std::vector<int64_t> out;
  for (const auto& e : v) {
    if (!e.is_number_integer())
      fail(key, fmt::format("must be an array of integers, but holds {}", e.dump()));
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::optional<int64_t> Attrs::opt_i(const char* key) const {
  if (at(key).is_null()) return std::nullopt;
  return i(key);
}

std::optional<double> Attrs::opt_f(const char* key) const {
  if (at(key).is_null()) return std::nullopt;
  return f(key);
}

DType Attrs::dtype(const char* key) const {
  const std::string name = s(key);
  if (std::optional<DType> dt = dtype_from_name(name)) return *dt;
  fail(key, fmt::format("names no dtype: \"{}\"", name));
}

nlohmann::json attr_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

nlohmann::json attr_optional(const std::optional<double>& v) {
  return v ? attr_double(*v) : nlohmann::json();
}

nlohmann::json attr_optional(const std::optional<int64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

namespace {
bool fits(const std::vector<std::string>& names, size_t n) {
  size_t required = 0;
  for (const std::string& name : names) {
    if (ends_with(name, "...")) return n >= required;
    if (!ends_with(name, "?")) ++required;
  }
  return n >= required && n <= names.size();
}
}  // namespace

bool OpSchema::accepts_inputs(size_t n) const {
  return fits(inputs, n);
}

bool OpSchema::accepts_outputs(size_t n) const {
  return fits(outputs, n);
}

std::string OpSchema::describe() const {
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
    return "(" + s + ")";
  };
  return list(inputs) + " -> " + list(outputs);
}

bool register_op(OpDefinition def) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (t.defs.count(def.name)) {
    t.duplicates.push_back(def.name);
    return false;
  }
  std::string name = def.name;
  t.defs.emplace(std::move(name), std::move(def));
  return true;
}

const OpDefinition* find_op_definition(const std::string& name) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.defs.find(name);
  return it == t.defs.end() ? nullptr : &it->second;
}

OpPtr make_op(const std::string& name, const nlohmann::json& attrs) {
  const OpDefinition* def = find_op_definition(name);
  if (!def) {
    std::string known;
    for (const std::string& n : registered_op_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(fmt::format("[make_op] unknown op '{}'; known ops: {}", name, known));
  }
  OpPtr op = def->factory(Attrs(name, attrs));
  KILN_INTERNAL_ASSERT(
      op && name == op->name(),
      fmt::format("the factory of '{}' built an op named '{}'", name, op ? op->name() : "(null)"));
  return op;
}

std::vector<std::string> registered_op_names() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<std::string> names;
  for (const auto& [name, def] : t.defs) names.push_back(name);
  return names;
}

std::vector<std::string> duplicate_op_names() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.duplicates;
}

bool op_equivalent(const Op& a, const Op& b) {
  return std::string_view(a.name()) == b.name() && a.attrs() == b.attrs();
}

uint64_t op_hash(const Op& op) {
  // FNV-1a over "name" + canonical attrs text (nlohmann's objects are sorted by key).
  const std::string text = std::string(op.name()) + op.attrs().dump();
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace kiln
