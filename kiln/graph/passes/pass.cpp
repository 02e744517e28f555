#include "kiln/graph/passes/pass.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace kiln::graph {
namespace {

struct PassEntry {
  std::string name;
  std::function<bool(Graph&, const OptimizeOptions&)> run;
};

const std::vector<PassEntry>& pipeline() {
  static const std::vector<PassEntry> passes = {
      {"simplify", [](Graph& g, const OptimizeOptions&) { return passes::simplify(g); }},
      {"cse",
       [](Graph& g, const OptimizeOptions&) { return passes::eliminate_common_subexpressions(g); }},
      {"conv_bn",
       [](Graph& g, const OptimizeOptions& o) { return passes::fuse_conv_bn(g, o.freeze); }},
      {"linear",
       [](Graph& g, const OptimizeOptions& o) { return passes::fuse_linear(g, o.freeze); }},
      {"fold",
       [](Graph& g, const OptimizeOptions& o) { return passes::fold_constants(g, o.freeze); }},
      {"dce", [](Graph& g, const OptimizeOptions&) { return passes::eliminate_dead_code(g); }},
      {"fuse", [](Graph& g, const OptimizeOptions&) { return passes::fuse_elementwise(g); }},
  };
  return passes;
}

// Run once each, after the fixed point: their rewrites are ones the pipeline would undo (cse
// merges the recomputed copies back into the originals).
const std::vector<PassEntry>& finishing() {
  static const std::vector<PassEntry> passes = {
      {"layout", [](Graph& g, const OptimizeOptions&) { return passes::assign_layouts(g); }},
      {"hoist", [](Graph& g, const OptimizeOptions&) { return passes::hoist_writes(g); }},
      {"remat", [](Graph& g, const OptimizeOptions&) { return passes::rematerialize(g); }},
  };
  return passes;
}

constexpr int kMaxRounds = 4;

std::vector<std::string> split_names(const char* text) {
  std::vector<std::string> names;
  std::string cur;
  for (const char* p = text;; ++p) {
    if (*p == ',' || *p == ' ' || *p == '\0') {
      if (!cur.empty()) names.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return names;
}

}  // namespace

const std::vector<std::string>& pass_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const PassEntry& p : pipeline()) n.push_back(p.name);
    for (const PassEntry& p : finishing()) n.push_back(p.name);
    return n;
  }();
  return names;
}

std::string OptimizeReport::format() const {
  std::string out = fmt::format("{} nodes -> {} in {} round{}", nodes_before, nodes_after, rounds,
                                rounds == 1 ? "" : "s");
  for (const PassStat& p : passes)
    out += fmt::format("\n  {:<9} {:>4} nodes {}, changed in {} round{}, {:.3f} ms", p.pass,
                       std::abs(p.nodes_removed), p.nodes_removed < 0 ? "added" : "removed",
                       p.rounds_changed, p.rounds_changed == 1 ? "" : "s", p.ms);
  for (const std::string& s : skipped) out += fmt::format("\n  {:<9} skipped", s);
  return out;
}

Graph optimize(const Graph& g, const OptimizeOptions& options, OptimizeReport* report,
               const Loc& loc) {
  std::vector<std::string> skip = options.skip;
  if (const char* env = std::getenv("KILN_GRAPH_SKIP_PASSES"))
    for (std::string& s : split_names(env)) skip.push_back(std::move(s));
  const std::vector<std::string>& names = pass_names();
  for (const std::string& s : skip)
    if (std::find(names.begin(), names.end(), s) == names.end())
      fail("optimize", loc, "unknown pass '{}' to skip; the passes are {}", s,
           fmt::join(names, ", "));
  auto skipped = [&](const std::string& name) {
    return std::find(skip.begin(), skip.end(), name) != skip.end();
  };

  Graph out = g;
  OptimizeReport r;
  r.nodes_before = static_cast<int>(g.nodes.size());
  for (const auto* list : {&pipeline(), &finishing()})
    for (const PassEntry& p : *list) {
      if (skipped(p.name))
        r.skipped.push_back(p.name);
      else
        r.passes.push_back({p.name});
    }
  size_t k = 0;  // index into r.passes
  // Runs p on `out`; true when it changed the graph.
  auto run = [&](const PassEntry& p) {
    PassStat& stat = r.passes[k++];
    const int before = static_cast<int>(out.nodes.size());
    const auto t0 = std::chrono::steady_clock::now();
    const bool did = p.run(out, options);
    stat.ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!did) return false;
    ++stat.rounds_changed;
    stat.nodes_removed += before - static_cast<int>(out.nodes.size());
    out.validate();
    if (options.after_pass) options.after_pass(p.name, out);
    return true;
  };
  bool changed = true;
  while (changed && r.rounds < kMaxRounds) {
    changed = false;
    ++r.rounds;
    k = 0;
    for (const PassEntry& p : pipeline())
      if (!skipped(p.name)) changed = run(p) || changed;
  }
  for (const PassEntry& p : finishing())
    if (!skipped(p.name)) run(p);
  r.nodes_after = static_cast<int>(out.nodes.size());
  if (report != nullptr) *report = std::move(r);
  return out;
}

}  // namespace kiln::graph
