#include "kiln/graph/symbolic.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "kiln/graph/tracer.h"

namespace kiln::graph {

namespace {

// Each symbol's two probe sizes (Note [symbolic dims]).
constexpr int64_t kProbes[][2] = {{11, 13}, {17, 19}, {23, 29}, {31, 37},
                                  {41, 43}, {47, 53}, {59, 61}, {67, 71}};
constexpr size_t kMaxSymbols = std::size(kProbes);

struct Symbols {
  std::vector<std::string> names;  // in order of first appearance
  int64_t probe(const std::string& s, int which) const {
    const auto i = static_cast<size_t>(std::find(names.begin(), names.end(), s) - names.begin());
    return kProbes[i][which];
  }
};

Graph trace_once(const std::string& name, const TraceFn& fn,
                 const std::vector<TensorSpec>& signature, const Symbols& symbols, int which,
                 const Loc& loc) {
  Tracer tracer(name);
  std::vector<Tensor> inputs;
  for (const TensorSpec& spec : signature)
    inputs.push_back(
        tracer.add_input(spec, [&](const std::string& s) { return symbols.probe(s, which); }));
  tracer.start();
  std::vector<Tensor> outputs = fn(inputs);
  return tracer.finish(outputs, loc);
}

// The first place two attr documents differ: its path ("shape[0]") and both values.
struct AttrDiff {
  std::string path;
  nlohmann::json a, b;
};
std::optional<AttrDiff> first_difference(const nlohmann::json& a, const nlohmann::json& b,
                                         const std::string& path) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key())) return AttrDiff{path + it.key(), it.value(), nullptr};
      if (auto d = first_difference(it.value(), b.at(it.key()), path + it.key())) return d;
    }
    return std::nullopt;
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (size_t i = 0; i < a.size(); ++i)
      if (first_difference(a[i], b[i], path)) return AttrDiff{path, a, b};
    return std::nullopt;
  }
  if (a == b) return std::nullopt;
  return AttrDiff{path, a, b};
}

// The symbol whose probes give a = k * p1 and b = k * p2 (k > 0), if exactly one does.
std::optional<std::pair<std::string, int64_t>> symbol_of(int64_t a, int64_t b,
                                                         const Symbols& symbols) {
  std::optional<std::pair<std::string, int64_t>> found;
  for (const std::string& s : symbols.names) {
    const int64_t p1 = symbols.probe(s, 0), p2 = symbols.probe(s, 1);
    if (a > 0 && a % p1 == 0 && b % p2 == 0 && a / p1 == b / p2) {
      if (found) return std::nullopt;
      found = std::make_pair(s, a / p1);
    }
  }
  return found;
}

// Which symbols an attr that differs may depend on, for the message.
std::string suspects(const AttrDiff& d, const Symbols& symbols) {
  std::vector<int64_t> xs, ys;
  auto collect = [](const nlohmann::json& j, std::vector<int64_t>& out, auto&& self) -> void {
    if (j.is_number_integer()) out.push_back(j.get<int64_t>());
    // A size turned into a scalar (div(x, double(n))) is a whole float.
    if (j.is_number_float() && std::abs(j.get<double>()) < 9e15 &&
        j.get<double>() == std::floor(j.get<double>()))
      out.push_back(static_cast<int64_t>(j.get<double>()));
    if (j.is_array())
      for (const auto& e : j) self(e, out, self);
  };
  collect(d.a, xs, collect);
  collect(d.b, ys, collect);
  if (xs.size() == ys.size())
    for (size_t i = 0; i < xs.size(); ++i)
      if (xs[i] != ys[i])
        if (auto s = symbol_of(xs[i], ys[i], symbols)) return "the dynamic dim '" + s->first + "'";
  std::string all;
  for (const std::string& s : symbols.names) all += (all.empty() ? "'" : ", '") + s + "'";
  return "a dynamic dim (" + all + ")";
}

std::string probes_text(const Symbols& symbols, int which) {
  std::string out;
  for (const std::string& s : symbols.names)
    out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", s, symbols.probe(s, which));
  return out;
}

// The same tensor, or a constant the function made in each trace (tensor({...})) with the same
// dtype, shape and values.
bool same_capture(const Tensor& a, const Tensor& b) {
  if (a.impl() == b.impl()) return true;
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.requires_grad() || b.requires_grad())
    return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                    [](double u, double v) { return u == v || (std::isnan(u) && std::isnan(v)); });
}

// The first node that reads one of `values`.
const Node* first_reader(const Graph& g, const std::vector<int>& values) {
  for (const Node& n : g.nodes)
    for (int id : n.inputs)
      if (std::find(values.begin(), values.end(), id) != values.end()) return &n;
  return nullptr;
}

// "float32[3] [11, 1, 2]": a constant's type, and its values when there are few.
std::string describe_constant(const Tensor& t) {
  std::string out = fmt::format("{}{}", dtype_name(t.dtype()), shape_str(t.shape()));
  if (t.numel() > 16 || t.is_meta()) return out;
  std::string values;
  for (double v : t.to_vector<double>())
    values += fmt::format("{}{}", values.empty() ? "" : ", ", v);
  return out + (t.dim() == 0 ? " " + values : " [" + values + "]");
}

const Loc& node_loc(const Node& n, const Loc& fallback) {
  return n.loc ? *n.loc : fallback;
}

void compare(Graph& a, const Graph& b, const Symbols& symbols, const Loc& loc) {
  const std::string at0 = probes_text(symbols, 0), at1 = probes_text(symbols, 1);
  // Note [size guards]: the same comparisons, with the same answers, at both probe sizes.
  for (size_t i = 0; i < std::max(a.guards.size(), b.guards.size()); ++i) {
    const SymGuard* ga = i < a.guards.size() ? &a.guards[i] : nullptr;
    const SymGuard* gb = i < b.guards.size() ? &b.guards[i] : nullptr;
    // A conversion to a number (Note [size guards]): the number differs between the probes
    // when it depends on the dynamic dim, so the graph would hold one size's number.
    if (ga && gb && ga->converted && gb->converted && ga->a.same_expression(gb->a) &&
        ga->b.hint() != gb->b.hint())
      fail("trace", loc,
           "'{}' converts the size {} to a number at {} ({} with {} and {} with {}), so a graph "
           "would hold one size's number for every size; keep it a kiln::SymInt (auto n = "
           "x.size(0)) and pass it to kiln's ops (view, reshape, full, arange, narrow, div), or "
           "make the dim static in the signature",
           a.name, size_text(a, ga->a), ga->where, ga->b.hint(), at0, gb->b.hint(), at1);
    if (!ga || !gb || ga->compare != gb->compare || !ga->a.same_expression(gb->a) ||
        !ga->b.same_expression(gb->b))
      fail("trace", loc,
           "'{}' compares sizes differently for different sizes of a dynamic dim: {} with {} "
           "and {} with {}",
           a.name, ga ? ga->format() + " at " + ga->where : "nothing", at0,
           gb ? gb->format() + " at " + gb->where : "nothing", at1);
    if (ga->result != gb->result)
      fail("trace", loc,
           "'{}' takes another path for another size: {} at {} is {} with {} and {} with {}, so "
           "a graph would be right for some sizes only; branch with kiln::cond or kiln::where on "
           "the tensor, or make the dim static in the signature",
           a.name,
           fmt::format("{} {} {}", size_text(a, ga->a), sym_compare_name(ga->compare),
                       size_text(a, ga->b)),
           ga->where, ga->result, at0, gb->result, at1);
  }
  const size_t common = std::min(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i <= common; ++i) {
    const bool a_ends = i == a.nodes.size(), b_ends = i == b.nodes.size();
    if (a_ends && b_ends) break;
    const Node* na = a_ends ? nullptr : &a.nodes[i];
    const Node* nb = b_ends ? nullptr : &b.nodes[i];
    const bool same = na && nb && std::string_view(na->op->name()) == nb->op->name() &&
                      na->inputs == nb->inputs && na->outputs == nb->outputs;
    if (!same) {
      const Node& shown = na ? *na : *nb;
      fail("trace", node_loc(shown, loc),
           "'{}' runs different ops for different sizes of a dynamic dim: op {} is {} with {} "
           "and {} with {}; a graph would be right for one size only (use kiln's ops on the "
           "tensor instead of C++ on its size, or make the dim static in the signature)",
           a.name, i, na ? "'" + std::string(na->op->name()) + "'" : "missing", at0,
           nb ? "'" + std::string(nb->op->name()) + "'" : "missing", at1);
    }
    // A symbolic attr is the same expression in both (its numbers differ by design).
    const bool same_sym = na->sym_attrs.size() == nb->sym_attrs.size() &&
                          std::equal(na->sym_attrs.begin(), na->sym_attrs.end(),
                                     nb->sym_attrs.begin(), [](const SymAttr& x, const SymAttr& y) {
                                       return x.path == y.path && x.value.same_expression(y.value);
                                     });
    if (!same_sym)
      fail("trace", node_loc(*na, loc),
           "'{}': {} computes its attributes from sizes differently with {} and with {}; a graph "
           "would be right for one size only",
           a.name, na->op->name(), at0, at1);
    nlohmann::json attrs_a = na->op->attrs(), attrs_b = nb->op->attrs();
    for (const SymAttr& s : na->sym_attrs) {
      attrs_a[nlohmann::json::json_pointer(s.path)] = 0;
      attrs_b[nlohmann::json::json_pointer(s.path)] = 0;
    }
    if (auto d = first_difference(attrs_a, attrs_b, "")) {
      // A constant made without inputs (the scalar of div(x, double(n))) is named by the op
      // that reads it, at that op's line.
      if (na->inputs.empty())
        if (const Node* reader = first_reader(a, na->outputs))
          fail("trace", node_loc(*reader, loc),
               "'{}': the constant that '{}' reads is made by {} whose attribute {} is {} with {} "
               "and {} with {}, so it depends on {}, and the graph would keep one size; compute it "
               "with ops "
               "on the input, or make the dim static in the signature",
               a.name, reader->op->name(), na->op->name(), d->path, d->a.dump(), at0, d->b.dump(),
               at1, suspects(*d, symbols));
      fail("trace", node_loc(*na, loc),
           "'{}': {}'s attribute {} is {} with {} and {} with {}, so it depends on {}, and the "
           "graph would keep one size; compute it with an op that reads the size from its input "
           "(reshape and view take -1), or make the dim static in the signature",
           a.name, na->op->name(), d->path, d->a.dump(), at0, d->b.dump(), at1,
           suspects(*d, symbols));
    }
  }
  if (a.values.size() != b.values.size() || a.outputs != b.outputs ||
      a.captures.size() != b.captures.size())
    fail("trace", loc, "'{}' returns different values for different sizes of a dynamic dim",
         a.name);
  for (size_t i = 0; i < a.captures.size(); ++i)
    if (!same_capture(a.captures[i].tensor, b.captures[i].tensor)) {
      const Node* reader = first_reader(a, {a.captures[i].value});
      fail("trace", reader ? node_loc(*reader, loc) : loc,
           "'{}': {} reads a tensor made outside kiln's ops that differs with the size: {} with "
           "{} and {} with {}, so it depends on a dynamic dim; compute it with ops on the "
           "input's size, or make it an input",
           a.name, reader ? "'" + std::string(reader->op->name()) + "'" : "the graph",
           describe_constant(a.captures[i].tensor), at0, describe_constant(b.captures[i].tensor),
           at1);
    }
  for (size_t v = 0; v < a.values.size(); ++v) {
    SymShape& sa = a.values[v].shape;
    const SymShape& sb = b.values[v].shape;
    if (sa.size() != sb.size())
      fail("trace", loc,
           "'{}': value %{} has rank {} with {} and rank {} with {}; its rank depends on a "
           "dynamic dim",
           a.name, v, sa.size(), at0, sb.size(), at1);
    for (size_t d = 0; d < sa.size(); ++d) {
      if (sa[d].is_symbolic() || sa[d].size == sb[d].size) continue;
      if (auto s = symbol_of(sa[d].size, sb[d].size, symbols))
        sa[d].symbol = s->second == 1 ? s->first : fmt::format("{}*{}", s->second, s->first);
      else
        sa[d].symbol = "?";
    }
  }
}

}  // namespace

namespace {

// Note [symbolic attrs]: a leaf that is a static dim is its size; one that is a symbol (or k times
// one) reads the first graph input dim of that symbol, so that passes may drop or merge the value
// it was read from; any other leaf stays.
class LeafNormalizer {
 public:
  explicit LeafNormalizer(const Graph& g) : g_(g) {
    for (int id : g.inputs) {
      const SymShape& shape = g.value(id).shape;
      for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d].is_symbolic() && !input_dim(shape[d].symbol))
          input_dims_.emplace_back(shape[d].symbol,
                                   SymInt::dim_of(id, static_cast<int>(d), shape[d].size));
    }
  }
  SymInt operator()(const SymInt& s) const {
    return s.map_leaves([&](int v, int d, const SymInt& leaf) -> SymInt {
      const Dim& dim = g_.values[static_cast<size_t>(v)].shape[static_cast<size_t>(d)];
      if (!dim.is_symbolic()) return SymInt(dim.size);
      if (const SymInt* in = input_dim(dim.symbol)) return *in;
      const size_t star = dim.symbol.find('*');  // "784*batch" (Note [symbolic dims])
      if (star != std::string::npos && star > 0)
        if (const SymInt* in = input_dim(dim.symbol.substr(star + 1))) {
          int64_t k = 0;
          const char* end = dim.symbol.data() + star;
          const auto [at, ec] = std::from_chars(dim.symbol.data(), end, k);
          if (ec == std::errc() && at == end && k > 0) return k * *in;
        }
      return leaf;
    });
  }

 private:
  const SymInt* input_dim(const std::string& symbol) const {
    for (const auto& [s, leaf] : input_dims_)
      if (s == symbol) return &leaf;
    return nullptr;
  }
  const Graph& g_;
  std::vector<std::pair<std::string, SymInt>> input_dims_;
};

}  // namespace

std::string size_text(const Graph& g, const SymInt& s) {
  return s.format([&](int v, int d) -> std::string {
    if (v >= 0 && static_cast<size_t>(v) < g.values.size()) {
      const SymShape& shape = g.values[static_cast<size_t>(v)].shape;
      if (d >= 0 && static_cast<size_t>(d) < shape.size() &&
          shape[static_cast<size_t>(d)].is_symbolic())
        return shape[static_cast<size_t>(d)].symbol;
    }
    return fmt::format("size(%{}, {})", v, d);
  });
}

void fold_static_sym_attrs(Graph& g) {
  const LeafNormalizer normalize(g);
  for (Node& n : g.nodes) {
    SymAttrs kept;
    for (SymAttr& s : n.sym_attrs) {
      s.value = normalize(s.value);
      if (s.value.is_symbolic()) kept.push_back(std::move(s));
    }
    n.sym_attrs = std::move(kept);
  }
  // Note [size guards]: a guard on static sizes always holds; the others must read graph inputs
  // only, so that a call is checked before it runs.
  std::vector<SymGuard> kept;
  for (SymGuard& guard : g.guards) {
    guard.a = normalize(guard.a);
    guard.b = normalize(guard.b);
    if (!guard.a.is_symbolic() && !guard.b.is_symbolic()) continue;
    for (const SymInt* side : {&guard.a, &guard.b})
      side->for_each_leaf([&](int v, int) {
        if (std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end())
          throw Error(fmt::format(
              "[trace] '{}' compares {} at {}: a size that is no multiple of an input's dim "
              "cannot be checked before a call; compare the input's sizes instead",
              g.name, guard.format(), guard.where));
      });
    kept.push_back(std::move(guard));
  }
  g.guards = std::move(kept);
}

Graph trace_symbolic(const std::string& name, const TraceFn& fn,
                     const std::vector<TensorSpec>& signature, const Loc& loc) {
  Symbols symbols;
  for (const TensorSpec& spec : signature)
    for (const Dim& d : spec.shape)
      if (d.is_symbolic() &&
          std::find(symbols.names.begin(), symbols.names.end(), d.symbol) == symbols.names.end())
        symbols.names.push_back(d.symbol);
  if (symbols.names.size() > kMaxSymbols)
    fail("trace", loc, "'{}' has {} symbolic dims; at most {} are supported", name,
         symbols.names.size(), kMaxSymbols);
  Graph first = trace_once(name, fn, signature, symbols, 0, loc);
  if (!symbols.names.empty()) {
    const Graph second = trace_once(name, fn, signature, symbols, 1, loc);
    compare(first, second, symbols, loc);
  }
  fold_static_sym_attrs(first);
  return first;
}

}  // namespace kiln::graph
