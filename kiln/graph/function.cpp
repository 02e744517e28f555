#include "kiln/graph/function.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <optional>

#include "kiln/core/grad_mode.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/symbolic.h"
#include "kiln/graph/tracer.h"

namespace kiln::graph {

namespace {

// What a trace without a signature depends on (Note [function cache]).
struct InputKey {
  DType dtype;
  Shape shape;
  Strides strides;
  bool requires_grad;
  bool operator==(const InputKey&) const = default;
};
struct CallKey {
  std::vector<InputKey> inputs;
  bool grad_mode = false;
  std::string state;  // FunctionOptions::state_key
  bool operator==(const CallKey&) const = default;
};

CallKey key_of(const std::vector<Tensor>& inputs, const std::string& name, std::string state,
               const Loc& loc) {
  CallKey key{{}, GradMode::is_enabled(), std::move(state)};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) fail("function '" + name + "'", loc, "input {} is undefined", i);
    key.inputs.push_back({t.dtype(), t.shape(), t.strides(), t.requires_grad()});
  }
  return key;
}

// What differs between the key a trace was made for and this call's, in a few words.
std::string difference(const CallKey& traced, const CallKey& now) {
  if (traced.state != now.state)
    return fmt::format("state changed {} -> {}", traced.state, now.state);
  if (traced.inputs.size() != now.inputs.size())
    return fmt::format("the number of inputs changed {} -> {}", traced.inputs.size(),
                       now.inputs.size());
  for (size_t i = 0; i < now.inputs.size(); ++i) {
    const InputKey &a = traced.inputs[i], &b = now.inputs[i];
    if (a.dtype != b.dtype)
      return fmt::format("input {} dtype changed {} -> {}", i, dtype_name(a.dtype),
                         dtype_name(b.dtype));
    if (a.shape.size() != b.shape.size())
      return fmt::format("input {} rank changed {} -> {} (shape {} -> {})", i, a.shape.size(),
                         b.shape.size(), shape_str(a.shape), shape_str(b.shape));
    for (size_t d = 0; d < a.shape.size(); ++d)
      if (a.shape[d] != b.shape[d])
        return fmt::format("input {} dim {} changed {} -> {}", i, d, a.shape[d], b.shape[d]);
    if (a.strides != b.strides)
      return fmt::format("input {} strides changed {} -> {}", i, shape_str(a.strides),
                         shape_str(b.strides));
    if (a.requires_grad != b.requires_grad)
      return fmt::format("input {} requires_grad changed {} -> {}", i, a.requires_grad,
                         b.requires_grad);
  }
  return fmt::format("grad mode changed {} -> {}", traced.grad_mode ? "on" : "off",
                     now.grad_mode ? "on" : "off");
}

// How many things differ: the nearest cached trace explains a retrace best.
int distance(const CallKey& a, const CallKey& b) {
  if (a.inputs.size() != b.inputs.size()) return 1 << 20;
  int n = (a.grad_mode != b.grad_mode) + (a.state != b.state);
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const InputKey &x = a.inputs[i], &y = b.inputs[i];
    n += (x.dtype != y.dtype) + (x.shape != y.shape) + (x.strides != y.strides) +
         (x.requires_grad != y.requires_grad);
  }
  return n;
}

struct Entry {
  CallKey key;
  std::shared_ptr<const Graph> graph;
  std::string traced_at;  // "main.cpp:10"
  std::shared_ptr<MemoryPlanner> planner = std::make_shared<MemoryPlanner>();
};

std::string where(const Loc& loc) {
  return SourceLine{loc.file_name(), loc.line(), loc.function_name()}.format();
}

}  // namespace

struct Function::State {
  Fn fn;
  FunctionOptions options;
  std::optional<std::vector<TensorSpec>> signature;
  mutable std::mutex mutex;
  std::vector<Entry> entries;
  FunctionStats stats;

  void report(const std::string& line) const {
    if (options.on_retrace != RetracePolicy::kLog) return;
    if (options.logger)
      options.logger(line);
    else
      std::cerr << line << "\n";
  }

  std::string state() const { return options.state_key ? options.state_key() : std::string(); }

  // The graph to cache: captures named, then optimized; the mutex is held.
  std::shared_ptr<const Graph> finished(Graph g, const Loc& loc) {
    if (options.capture_name)
      for (const Capture& c : g.captures)
        if (g.values[static_cast<size_t>(c.value)].name.empty())
          g.values[static_cast<size_t>(c.value)].name = options.capture_name(c.tensor);
    if (options.optimize) {
      OptimizeReport report;
      g = optimize(g, options.passes, &report, loc);
      stats.optimizations.push_back(std::move(report));
    }
    return std::make_shared<const Graph>(std::move(g));
  }

  // Says why a call keyed `key` retraces (the policy, the budget); the mutex is held.
  void note_retrace(const CallKey& key, const Loc& loc) {
    if (entries.empty()) return;
    const Entry* nearest = &entries.back();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it)
      if (distance(it->key, key) < distance(nearest->key, key)) nearest = &*it;
    note_retrace(fmt::format("retracing '{}': {} (traced at {})", options.name,
                             difference(nearest->key, key), nearest->traced_at),
                 loc);
  }
  void note_retrace(const std::string& reason, const Loc& loc) {
    if (options.on_retrace == RetracePolicy::kError)
      fail("function '" + options.name + "'", loc, "{}; retracing is an error for it", reason);
    stats.retrace_reasons.push_back(reason);
    if (static_cast<int>(stats.retrace_reasons.size()) > options.retrace_budget) {
      std::string all;
      for (const std::string& r : stats.retrace_reasons) all += "\n  " + r;
      fail("function '" + options.name + "'", loc,
           "retraced {} times, more than its budget of {} (FunctionOptions::retrace_budget); "
           "give it a signature with symbolic dims (TensorSpec({{\"batch\", ...}})) so one "
           "trace serves every size, and keep sizes as kiln::SymInt so that nothing assumes one. "
           "The retraces:{}",
           stats.retrace_reasons.size(), options.retrace_budget, all);
    }
    report(reason);
  }

  // A trace of fn for exactly these inputs (static sizes); the mutex is held.
  std::shared_ptr<const Graph> trace_static(const CallKey& key, const std::vector<Tensor>& inputs,
                                            const Loc& loc) {
    Tracer tracer(options.name);
    std::vector<Tensor> stand_ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string name = signature && i < signature->size() ? (*signature)[i].name : "";
      stand_ins.push_back(
          tracer.add_input(inputs[i], name.empty() ? fmt::format("input{}", i) : name));
    }
    tracer.start();
    std::vector<Tensor> outputs = fn(stand_ins);
    Graph traced = tracer.finish(outputs, loc);
    // Note [size guards]: the key fixes every input's shape, so every size the trace compared
    // is the same in each call this graph serves.
    traced.guards.clear();
    auto graph = finished(std::move(traced), loc);
    entries.push_back({key, graph, where(loc)});
    ++stats.traces;
    return graph;
  }

  // Note [size guards]: a call that breaks an assumption of the symbolic graph `g` gets a graph
  // specialized to its sizes, traced once per such sizes; the mutex is held.
  Entry* specialized(const Graph& g, const std::vector<Tensor>& inputs, const Loc& loc) {
    const auto symbols = bind_symbols(g, inputs, loc);  // the call fits the signature
    const SymGuard* broken = broken_guard(g, inputs);
    if (!broken) return nullptr;
    const CallKey key = key_of(inputs, options.name, state(), loc);
    for (Entry& e : entries)
      if (e.key == key) return &e;
    std::string sizes;
    for (const auto& [name, n] : symbols)
      sizes += fmt::format("{}{} = {}", sizes.empty() ? "" : ", ", name, n);
    const Entry& symbolic = *std::find_if(entries.begin(), entries.end(),
                                          [&](const Entry& e) { return e.graph.get() == &g; });
    note_retrace(fmt::format("retracing '{}': {}, and this call has {} (traced at {})",
                             options.name, assumption(g, *broken), sizes, symbolic.traced_at),
                 loc);
    trace_static(key, inputs, loc);
    return &entries.back();
  }

  // Traces for a call keyed `key`; the mutex is held.
  std::shared_ptr<const Graph> retrace(const CallKey& key, const std::vector<Tensor>& inputs,
                                       const Loc& loc) {
    note_retrace(key, loc);
    if (signature) {
      auto graph = finished(trace_symbolic(options.name, fn, *signature, loc), loc);
      entries.push_back({key, graph, where(loc)});
      ++stats.traces;
      return graph;
    }
    return trace_static(key, inputs, loc);
  }
};

Function::Function(Fn fn, std::optional<std::vector<TensorSpec>> signature, FunctionOptions options,
                   const Loc& loc)
    : state_(std::make_shared<State>()) {
  if (!fn) fail("function", loc, "expected a callable, but got an empty std::function");
  if (options.retrace_budget < 0)
    fail("function", loc, "expected retrace_budget >= 0, but got {}", options.retrace_budget);
  state_->fn = std::move(fn);
  state_->options = std::move(options);
  state_->signature = std::move(signature);
  if (state_->signature)
    state_->retrace(CallKey{{}, GradMode::is_enabled(), state_->state()}, {}, loc);
}

std::vector<Tensor> Function::operator()(const std::vector<Tensor>& inputs, const Loc& loc) const {
  State& st = *state_;
  std::shared_ptr<const Graph> graph;
  std::shared_ptr<MemoryPlanner> planner;
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    // With a signature the key is grad mode and the state: the signature covers the inputs.
    const CallKey key = st.signature ? CallKey{{}, GradMode::is_enabled(), st.state()}
                                     : key_of(inputs, st.options.name, st.state(), loc);
    for (const Entry& e : st.entries)
      if (e.key == key) {
        graph = e.graph;
        planner = e.planner;
        ++st.stats.hits;
        break;
      }
    if (!graph) {
      graph = st.retrace(key, inputs, loc);
      planner = st.entries.back().planner;
    }
    if (st.signature && !graph->guards.empty())
      if (const Entry* e = st.specialized(*graph, inputs, loc)) {
        graph = e->graph;
        planner = e->planner;
      }
  }
  std::optional<NoGradGuard> no_tape;
  if (!st.options.record_tape) no_tape.emplace();
  return run(*graph, inputs, loc, st.options.plan_memory ? planner.get() : nullptr);
}

FunctionStats Function::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

std::vector<MemoryPlannerStats> Function::memory_stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<MemoryPlannerStats> out;
  for (const Entry& e : state_->entries) out.push_back(e.planner->stats());
  return out;
}

void Function::release_idle_arenas() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (const Entry& e : state_->entries) e.planner->release_idle_arenas();
}

std::vector<std::shared_ptr<const Graph>> Function::graphs() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::shared_ptr<const Graph>> out;
  for (const Entry& e : state_->entries) out.push_back(e.graph);
  return out;
}

const std::string& Function::name() const {
  return state_->options.name;
}

Function function(Function::Fn fn, std::vector<TensorSpec> signature, FunctionOptions options,
                  const Loc& loc) {
  return Function(std::move(fn), std::move(signature), std::move(options), loc);
}

Function function(Function::Fn fn, FunctionOptions options, const Loc& loc) {
  return Function(std::move(fn), std::nullopt, std::move(options), loc);
}

}  // namespace kiln::graph
