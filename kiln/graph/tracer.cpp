#include "kiln/graph/tracer.h"

#include <fmt/format.h>

#include <unordered_map>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/node.h"
#include "kiln/core/call_site.h"
#include "kiln/core/rng.h"
#include "kiln/ops/op_factory.h"

namespace kiln::graph {

namespace {

SourceLine source_line(const Loc& loc) {
  return {loc.file_name(), loc.line(), loc.function_name()};
}

}  // namespace

struct Tracer::State {
  Graph graph;
  // The trace this one is nested in (a branch of kiln::cond traced inside a traced function),
  // and how many nested traces suspend this one now: while suspended it records nothing, so a
  // branch's ops go into the branch's graph only (Note [control flow]).
  State* outer = nullptr;
  int suspended = 0;
  // Which value each tensor the trace has seen holds, by TensorImpl: graph inputs, captures
  // (their real tensor and their meta stand-in) and node outputs.
  std::unordered_map<const TensorImpl*, int> value_of;
  // The meta tensor the ops see for each value.
  std::vector<Tensor> stand_in;
  // Every tensor whose TensorImpl is a key above, kept alive so that an address is never reused
  // for another tensor during the trace.
  std::vector<Tensor> keep;

  // The values each meta storage holds, for aliases made where the tracer does not look (the
  // tape saves a detached alias of an output; its backward then reads it).
  std::unordered_map<const Storage*, std::vector<int>> by_storage;

  // The SymInt of each value's dims asked so far (traced_size), by value id and dim.
  std::vector<SymSizes> sizes;

  int bind(const Tensor& t, int value, const Tensor& meta) {
    value_of[t.impl()] = value;
    value_of[meta.impl()] = value;
    by_storage[meta.storage().get()].push_back(value);
    if (stand_in.size() <= static_cast<size_t>(value)) stand_in.resize(value + 1);
    stand_in[static_cast<size_t>(value)] = meta;
    keep.push_back(t);
    keep.push_back(meta);
    return value;
  }

  int value_for_input(const Tensor& t, const OpCall& call) {
    if (auto it = value_of.find(t.impl()); it != value_of.end()) return it->second;
    // An alias of a value with its geometry (a tensor the tape saved) is that value.
    if (t.is_meta())
      if (auto it = by_storage.find(t.storage().get()); it != by_storage.end())
        for (int id : it->second) {
          const Tensor& s = stand_in[static_cast<size_t>(id)];
          if (s.dtype() == t.dtype() && s.shape() == t.shape() && s.strides() == t.strides() &&
              s.storage_offset() == t.storage_offset()) {
            value_of[t.impl()] = id;
            keep.push_back(t);
            return id;
          }
        }
    // A value of an enclosing trace (a branch reading a tensor the outer function computed) is
    // a capture of this graph; the outer trace records where it comes from.
    for (State* o = outer; t.is_meta() && o; o = o->outer)
      if (o->value_of.count(t.impl())) {
        const int id = graph.add_value(t.dtype(), static_shape(t.shape()));
        graph.captures.push_back({id, t});
        return bind(t, id, t);
      }
    if (t.is_meta())
      fail("trace", call.loc,
           "'{}': {} reads {}, a meta tensor that is neither an input of the traced function nor "
           "made inside it by an op",
           graph.name, call.op->name(), t.describe());
    // A real tensor read for the first time: captured by identity.
    const int id = graph.add_value(t.dtype(), static_shape(t.shape()));
    graph.captures.push_back({id, t});
    Tensor meta = t.to(kMeta);
    if (t.requires_grad()) meta.set_requires_grad(true);
    return bind(t, id, meta);
  }
};

namespace {

class TraceMode final : public DispatchMode {
 public:
  explicit TraceMode(Tracer::State* state) : state_(state) {}
  const char* name() const override { return "tracer"; }
  bool intercepts(const OpCall&) const override { return state_->suspended == 0; }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    Tracer::State& st = *state_;
    Node node;
    node.op = rebuilt(call);
    node.sym_attrs = symbolic_attrs(call, *node.op);
    // An op called inside a layer is recorded at the user's line (Note [user call site]).
    const Loc where = user_location(call.loc);
    node.where = source_line(where);
    node.loc = where;
    std::vector<Tensor> inputs;
    inputs.reserve(call.inputs.size());
    for (const Tensor& t : call.inputs) {
      const int id = st.value_for_input(t, call);
      node.inputs.push_back(id);
      inputs.push_back(st.stand_in[static_cast<size_t>(id)]);
    }
    std::vector<TensorMeta> metas = call.metas;
    for (TensorMeta& m : metas) m.device = kMeta;
    std::vector<Tensor> outputs = next(OpCall{call.op, inputs, metas, call.loc});
    for (const Tensor& out : outputs) {
      if (!out.defined()) {
        node.outputs.push_back(kNoValue);
        continue;
      }
      const int id = st.graph.add_value(out.dtype(), static_shape(out.shape()));
      node.outputs.push_back(id);
      st.bind(out, id, out);
      // The tape recorded this op before its outputs were values of the trace: tell it their
      // sizes now (Note [size-free backward]).
      if (auto* tape = dynamic_cast<autograd::OpNode*>(out.grad_fn().get())) {
        tape->set_output_sizes(out.output_nr(), sym_sizes(out));
        if (!node.sym_attrs.empty()) tape->set_sym_attrs(node.sym_attrs);
      }
    }
    st.graph.nodes.push_back(std::move(node));
    return outputs;
  }

 private:
  // The node's op is the one its (name, attrs) rebuild (Note [tracer]).
  static OpPtr rebuilt(const OpCall& call) {
    if (!find_op_definition(call.op->name()))
      fail("trace", call.loc,
           "op '{}' has no factory (Note [op factory]), so it cannot be recorded in a graph",
           call.op->name());
    nlohmann::json attrs = call.op->attrs();
    // A random node draws fresh blocks of the default generator on every run (Note [random
    // effects]); a draw from another generator cannot be replayed so, and says so. (On meta
    // nothing is reserved, so the default generator's state is the one the attrs hold.)
    if (call.op->draws_random()) {
      const Generator::State s = default_generator().get_state();
      if (attrs.value("seed", uint64_t{0}) != s.seed ||
          attrs.value("offset", uint64_t{0}) != s.offset)
        fail("trace", call.loc,
             "{} draws from a generator other than kiln's default one; a graph draws fresh "
             "numbers from the default generator on every run (Note [random effects]), so "
             "trace code that uses the default generator (pass no Generator)",
             call.op->name());
    }
    // A factory called with an input's device (zeros(shape, {.device = x.device()})) says meta
    // while tracing, because the stand-ins are meta; the graph runs on cpu.
    if (auto it = attrs.find("device"); it != attrs.end() && *it == kMeta.name()) *it = kCPU.name();
    return make_op(call.op->name(), attrs);
  }
  // The attrs the op's caller declared symbolic (Note [symbolic attrs]), checked against the
  // attrs: each is a number there, equal to the expression's value at the traced sizes.
  SymAttrs symbolic_attrs(const OpCall& call, const Op& op) const {
    SymAttrs sym = detail::take_sym_attrs(call.op->name());
    if (sym.empty()) return sym;
    const nlohmann::json attrs = op.attrs();
    for (const SymAttr& s : sym) {
      if (!s.value.owned_by(state_))
        fail("trace", call.loc,
             "{}'s attr {} = {} is computed from a size of the enclosing function inside a "
             "branch or loop body; compute the size outside it and pass the tensor as an operand",
             call.op->name(), s.path, s.value.format());
      const nlohmann::json::json_pointer ptr(s.path);
      if (!attrs.contains(ptr) || !attrs.at(ptr).is_number() ||
          attrs.at(ptr).get<double>() != static_cast<double>(s.value.hint()))
        throw InternalError(fmt::format(
            "kiln internal error: {}'s symbolic attr {} = {} (= {}) does not match its attrs {}",
            call.op->name(), s.path, s.value.format(), s.value.hint(), attrs.dump()));
    }
    return sym;
  }
  Tracer::State* state_;
};

// The trace this thread records, for the value-read hook (Note [value reads]).
thread_local Tracer::State* active_trace = nullptr;

[[noreturn]] void on_value_read(const Tensor& t, const char* what, const Loc& loc) {
  KILN_INTERNAL_ASSERT(active_trace != nullptr, "value-read hook without an active trace");
  const Tracer::State& st = *active_trace;
  std::string value = t.describe();
  if (auto it = st.value_of.find(t.impl()); it != st.value_of.end()) {
    const Value& v = st.graph.value(it->second);
    value = fmt::format("%{}: {}{}", it->second, dtype_name(v.dtype), format_shape(v.shape));
    if (!v.name.empty()) value += " ('" + v.name + "')";
  }
  fail("trace", loc,
       "'{}' reads the value of {} ({}); a graph cannot depend on data this way — use "
       "kiln::cond / kiln::where, or make it an input",
       st.graph.name, value, what);
}

// Note [size guards]: a comparison of a size of this trace, recorded with its answer. A branch
// may compare (or convert) a size of a trace it is nested in: the guard belongs to that trace.
void record_guard(SymGuard guard) {
  if (!active_trace || active_trace->suspended) return;
  for (Tracer::State* owner = active_trace; owner; owner = owner->outer)
    if (guard.a.owned_by(owner) && guard.b.owned_by(owner)) {
      owner->graph.guards.push_back(std::move(guard));
      return;
    }
  fail("trace", Loc::current(),
       "'{}' compares {} at {}, sizes of two different traces; compare sizes of one function",
       active_trace->graph.name, guard.format(), guard.where);
}

// Note [symbolic sizes]: a dim of a value of this trace is that value's dim.
SymInt traced_size(const Tensor& t, int64_t dim, int64_t size) {
  if (!active_trace || active_trace->suspended) return SymInt(size);
  auto it = active_trace->value_of.find(t.impl());
  if (it == active_trace->value_of.end()) return SymInt(size);
  // One SymInt per dim of a value, made on first use: every op records its inputs' sizes (Note
  // [size-free backward]), so a fresh node per question would cost an allocation each.
  std::vector<SymSizes>& cache = active_trace->sizes;
  const auto v = static_cast<size_t>(it->second), d = static_cast<size_t>(dim);
  if (cache.size() <= v) cache.resize(v + 1);
  if (cache[v].size() <= d) cache[v].resize(d + 1);
  SymInt& s = cache[v][d];
  if (!s.is_symbolic() || s.hint() != size)
    s = SymInt::dim_of(it->second, static_cast<int>(dim), size, active_trace);
  return s;
}

// Note [size-free backward]: a size recorded by this trace, while it records.
bool usable_size(const SymInt& s) {
  return active_trace != nullptr && active_trace->suspended == 0 && s.owned_by(active_trace);
}

// Note [traced gradients]: the stand-in a captured tensor is seen as.
Tensor stand_in_for_grad(const Tensor& t) {
  if (!active_trace) return t;
  const Tracer::State& st = *active_trace;
  auto it = st.value_of.find(t.impl());
  return it == st.value_of.end() ? t : st.stand_in[static_cast<size_t>(it->second)];
}

}  // namespace

bool Tracer::active() {
  return active_trace != nullptr;
}

Tracer::Tracer(std::string name) : state_(std::make_shared<State>()) {
  state_->graph.name = std::move(name);
}

Tracer::~Tracer() {
  stop();
}

Tensor Tracer::add_input(const TensorSpec& spec, int64_t probe) {
  return add_input(spec, [probe](const std::string&) { return probe; });
}

Tensor Tracer::add_input(const TensorSpec& spec,
                         const std::function<int64_t(const std::string&)>& size_of) {
  Shape shape;
  SymShape sym = spec.shape;
  for (Dim& d : sym) {
    if (d.is_symbolic()) d.size = size_of(d.symbol);
    shape.push_back(d.size);
  }
  const int id = state_->graph.add_value(spec.dtype, std::move(sym), spec.name);
  state_->graph.inputs.push_back(id);
  Tensor meta = empty(shape, {spec.dtype, kMeta});
  state_->bind(meta, id, meta);
  return meta;
}

Tensor Tracer::add_input(const Tensor& example, std::string name) {
  const int id =
      state_->graph.add_value(example.dtype(), static_shape(example.shape()), std::move(name));
  state_->graph.inputs.push_back(id);
  Tensor meta = example.to(kMeta);
  if (example.requires_grad()) meta.set_requires_grad(true);
  state_->bind(meta, id, meta);
  return meta;
}

void Tracer::start() {
  KILN_INTERNAL_ASSERT(!guard_, "Tracer::start called twice");
  guard_ = std::make_unique<DispatchModeGuard>(std::make_shared<TraceMode>(state_.get()));
  mixed_ = std::make_unique<detail::MixedMetaScope>();
  outer_trace_ = active_trace;
  state_->outer = outer_trace_;
  if (outer_trace_) ++outer_trace_->suspended;
  active_trace = state_.get();
  outer_hook_ = detail::set_value_read_hook(on_value_read);
  outer_grad_hook_ = detail::set_grad_input_hook(stand_in_for_grad);
  outer_size_hook_ = detail::set_sym_size_hook(traced_size);
  outer_guard_hook_ = detail::set_sym_guard_hook(record_guard);
  outer_usable_hook_ = detail::set_sym_usable_hook(usable_size);
}

void Tracer::stop() {
  if (!guard_) return;
  detail::set_value_read_hook(outer_hook_);
  detail::set_grad_input_hook(outer_grad_hook_);
  detail::set_sym_size_hook(outer_size_hook_);
  detail::set_sym_guard_hook(outer_guard_hook_);
  detail::set_sym_usable_hook(outer_usable_hook_);
  active_trace = outer_trace_;
  if (outer_trace_) --outer_trace_->suspended;
  mixed_.reset();
  guard_.reset();
}

Graph Tracer::finish(const std::vector<Tensor>& outputs, const Loc& loc) {
  stop();
  State& st = *state_;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    if (!t.defined())
      fail("trace", loc, "'{}' returned an undefined tensor as output {}", st.graph.name, i);
    auto it = st.value_of.find(t.impl());
    if (it == st.value_of.end()) {
      if (t.is_meta())
        fail("trace", loc, "'{}' returned {} as output {}, a meta tensor the trace did not make",
             st.graph.name, t.describe(), i);
      // A real tensor returned without an op reading it: a capture too.
      const int id = st.graph.add_value(t.dtype(), static_shape(t.shape()));
      st.graph.captures.push_back({id, t});
      st.bind(t, id, t.to(kMeta));
      st.graph.outputs.push_back(id);
      continue;
    }
    st.graph.outputs.push_back(it->second);
  }
  st.graph.validate();
  Graph g = std::move(st.graph);
  state_ = std::make_shared<State>();
  return g;
}

}  // namespace kiln::graph
