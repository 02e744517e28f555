// The backward engine: walks the tape from the outputs in dependency order.
#include "kiln/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "kiln/autograd/node.h"
#include "kiln/core/call_site.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"

namespace kiln {

namespace {

using autograd::AccumulateGrad;
using autograd::Edge;
using autograd::Node;

struct Target {
  Node* node;
  uint32_t slot;
  bool operator==(const Target&) const = default;
};
struct TargetHash {
  size_t operator()(const Target& t) const { return std::hash<Node*>()(t.node) * 31 + t.slot; }
};

class GraphTask {
 public:
  GraphTask(bool retain_graph, bool create_graph, const Loc& loc)
      : retain_graph_(retain_graph), create_graph_(create_graph), loc_(loc) {}

  // Gradients for `captures` are collected instead of accumulated (grad()); empty = backward().
  std::vector<Tensor> run(const std::vector<Tensor>& outputs,
                          const std::vector<Tensor>& grad_outputs,
                          const std::vector<Tensor>& captures, bool allow_unused) {
    const char* op = captures.empty() ? "backward" : "grad";
    if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
      fail(op, loc_, "expected one grad_output per output ({}), but got {}", outputs.size(),
           grad_outputs.size());
    std::vector<Edge> roots;
    std::vector<Tensor> seeds;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& out = outputs[i];
      if (!out.requires_grad())
        fail(op, loc_,
             "expected outputs that require grad, but output {} ({}) does not require "
             "grad and has no grad_fn (was it computed under NoGradGuard, or from tensors that do "
             "not require grad?)",
             i, out.describe());
      Tensor seed = grad_outputs.empty() ? Tensor() : grad_outputs[i];
      if (!seed.defined()) {
        if (out.numel() != 1)
          fail(op, loc_,
               "grad can be implicitly created only for scalar outputs, but got output "
               "{} {}; pass grad_outputs of the same shape",
               i, out.describe());
        seed = ones_like(out);
      } else if (seed.shape() != out.shape()) {
        fail(op, loc_, "expected grad_output {} of shape {}, but got {}", i, shape_str(out.shape()),
             seed.describe());
      }
      roots.push_back(autograd::gradient_edge(out));
      seeds.push_back(seed);
    }
    for (size_t i = 0; i < captures.size(); ++i) {
      if (!captures[i].requires_grad())
        fail(op, loc_, "expected inputs that require grad, but input {} ({}) does not", i,
             captures[i].describe());
      Edge e = autograd::gradient_edge(captures[i]);
      capture_index_[{e.fn.get(), e.input_nr}].push_back(i);
      keep_alive_.push_back(e.fn);
    }
    captured_.resize(captures.size());
    discover(roots);
    for (size_t i = 0; i < roots.size(); ++i) accumulate(roots[i], seeds[i]);
    execute(roots);
    if (!allow_unused)
      for (size_t i = 0; i < captured_.size(); ++i)
        if (!captured_[i].defined())
          fail(op, loc_,
               "input {} ({}) was not used to compute the outputs; pass "
               "allow_unused=true to get an undefined gradient for it",
               i, captures[i].describe());
    return std::move(captured_);
  }

 private:
  // Counts, for every node that leads to a gradient we want, how many edges feed it.
  void discover(const std::vector<Edge>& roots) {
    std::unordered_map<Node*, bool> needed;  // memo: does this node lead to a wanted gradient?
    std::vector<std::pair<Node*, size_t>> stack;
    auto wanted_here = [&](Node* n) {
      if (capture_index_.empty()) return true;
      for (uint32_t s = 0; s < std::max<size_t>(n->num_outputs(), 1); ++s)
        if (capture_index_.count({n, s})) return true;
      return false;
    };
    for (const Edge& r : roots) {
      if (!r.fn || needed.count(r.fn.get())) continue;
      needed[r.fn.get()] = wanted_here(r.fn.get());
      stack.push_back({r.fn.get(), 0});
      while (!stack.empty()) {
        auto& [node, next] = stack.back();
        if (next < node->next_edges.size()) {
          Node* child = node->next_edges[next++].fn.get();
          if (child && !needed.count(child)) {
            needed[child] = wanted_here(child);
            stack.push_back({child, 0});
          }
          continue;
        }
        for (const Edge& e : node->next_edges)
          if (e.fn && needed[e.fn.get()]) needed[node] = true;
        stack.pop_back();
      }
    }
    for (auto& [node, need] : needed) {
      if (!need) continue;
      needed_.insert(node);
      for (const Edge& e : node->next_edges)
        if (e.fn && needed[e.fn.get()]) ++dependencies_[e.fn.get()];
    }
  }

  void accumulate(const Edge& edge, const Tensor& g) {
    if (!edge.fn || !g.defined() || !needed_.count(edge.fn.get())) return;
    auto& slots = buffers_[edge.fn.get()];
    if (slots.empty()) slots.resize(std::max<size_t>(edge.fn->num_outputs(), 1));
    Tensor& slot = slots[edge.input_nr];
    slot = slot.defined() ? add(slot, g) : g;
  }

  void execute(const std::vector<Edge>& roots) {
    auto later_first = [](const Node* a, const Node* b) { return a->sequence_nr < b->sequence_nr; };
    std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
    std::unordered_set<Node*> queued;
    for (const Edge& r : roots)
      if (r.fn && needed_.count(r.fn.get()) && !dependencies_[r.fn.get()] &&
          queued.insert(r.fn.get()).second)
        ready.push(r.fn.get());
    // Gradients are computed with grad mode on only when they must carry history.
    struct Restore {
      bool prev;
      ~Restore() { GradMode::set_enabled(prev); }
    } restore{GradMode::is_enabled()};
    GradMode::set_enabled(create_graph_);
    // The vjps run the ops the forward recorded, in the dtypes it recorded: no autocast inside a
    // backward pass (Note [autocast]), and a region's cached parameter casts, whose graph this pass
    // frees, are made anew by the next forward.
    detail::AutocastSuspend no_autocast;
    // Errors raised by nodes, hooks and vjps name the backward() call (Note [user call site]).
    CallSiteScope call_site(loc_);
    while (!ready.empty()) {
      Node* node = ready.top();
      ready.pop();
      std::vector<Tensor> grads = std::move(buffers_[node]);
      buffers_.erase(node);
      grads.resize(std::max<size_t>(node->num_outputs(), 1));
      run_hooks(node, grads);
      bool is_leaf = dynamic_cast<AccumulateGrad*>(node) != nullptr;
      bool capturing = !capture_index_.empty();
      if (!(is_leaf && capturing)) {
        std::vector<Tensor> out = apply_node(node, std::move(grads));
        if (!retain_graph_) node->release_saved();
        for (size_t i = 0; i < out.size() && i < node->next_edges.size(); ++i)
          accumulate(node->next_edges[i], out[i]);
      }
      for (const Edge& e : node->next_edges) {
        if (!e.fn || !needed_.count(e.fn.get())) continue;
        if (--dependencies_[e.fn.get()] == 0 && queued.insert(e.fn.get()).second)
          ready.push(e.fn.get());
      }
    }
  }

  // Under anomaly mode, the gradient a node returns is checked, not the ops of its vjp: those
  // would report kiln's own lines (and intermediate infinities that a vjp masks out on purpose,
  // like pow's log(0)), while the node names the user's op and line.
  std::vector<Tensor> apply_node(Node* node, std::vector<Tensor> grads) {
    if (!AnomalyMode::is_enabled()) return node->apply(std::move(grads));
    std::vector<Tensor> out;
    {
      struct Restore {
        ~Restore() { AnomalyMode::set_enabled(true); }
      } restore;
      AnomalyMode::set_enabled(false);
      out = node->apply(std::move(grads));
    }
    check_anomaly(*node, out);
    return out;
  }

  // Tensor hooks (which may replace a gradient), then captures for grad().
  void run_hooks(Node* node, std::vector<Tensor>& grads) {
    // Hooks see only gradients that flowed (none may reach a leaf whose consumer returned an
    // undefined gradient), and may not change what a gradient looks like.
    auto run = [&](const GradHook& h, Tensor& g, const std::string& whose) {
      if (!g.defined()) return;
      Tensor r = h(g);
      if (!r.defined()) return;
      if (r.shape() != g.shape() || r.dtype() != g.dtype() || r.device() != g.device())
        fail("backward", loc_,
             "expected a hook on the gradient of {} to return a gradient like "
             "its input ({}), but it returned {}",
             whose, g.describe(), r.describe());
      g = r;
    };
    if (auto* acc = dynamic_cast<AccumulateGrad*>(node)) {
      Tensor leaf = acc->leaf();
      if (leaf.defined() && leaf.impl()->autograd_)
        for (const GradHook& h : leaf.impl()->autograd_->leaf_hooks)
          run(h, grads[0], "a leaf " + leaf.describe());
    } else {
      for (size_t s = 0; s < node->output_hooks.size() && s < grads.size(); ++s)
        for (const GradHook& h : node->output_hooks[s])
          run(h, grads[s],
              fmt::format("output {} of '{}' (called at {})", s, node->name(),
                          format_location(node->loc)));
    }
    for (size_t s = 0; s < grads.size(); ++s) {
      auto it = capture_index_.find({node, static_cast<uint32_t>(s)});
      if (it == capture_index_.end()) continue;
      for (size_t index : it->second) captured_[index] = grads[s];
    }
  }

  void check_anomaly(const Node& node, const std::vector<Tensor>& grads) {
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined() && has_nonfinite(grads[i]))
        fail("backward", loc_,
             "anomaly detected: the gradient computed by '{}' (called at {}) for its input {} ({}) "
             "contains NaN or Inf",
             node.name(), format_location(node.loc), i, grads[i].describe());
  }

  bool retain_graph_, create_graph_;
  Loc loc_;
  std::unordered_map<Target, std::vector<size_t>, TargetHash> capture_index_;
  std::vector<std::shared_ptr<Node>> keep_alive_;
  std::vector<Tensor> captured_;
  std::unordered_set<Node*> needed_;
  std::unordered_map<Node*, size_t> dependencies_;
  std::unordered_map<Node*, std::vector<Tensor>> buffers_;
};

}  // namespace

namespace {
thread_local detail::GradInputHook grad_input_hook = nullptr;
}  // namespace

detail::GradInputHook detail::set_grad_input_hook(GradInputHook hook) {
  GradInputHook old = grad_input_hook;
  grad_input_hook = hook;
  return old;
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph,
                         bool create_graph, bool allow_unused, const Loc& loc) {
  if (inputs.empty()) fail("grad", loc, "expected at least one input, but got none");
  if (grad_input_hook) {
    // The stand-ins a trace's tape holds (Note [traced gradients]).
    std::vector<Tensor> resolved;
    resolved.reserve(inputs.size());
    for (const Tensor& t : inputs) resolved.push_back(t.defined() ? grad_input_hook(t) : t);
    return GraphTask(retain_graph || create_graph, create_graph, loc)
        .run(outputs, grad_outputs, resolved, allow_unused);
  }
  return GraphTask(retain_graph || create_graph, create_graph, loc)
      .run(outputs, grad_outputs, inputs, allow_unused);
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph, bool create_graph, const Loc& loc) {
  GraphTask(retain_graph || create_graph, create_graph, loc).run(outputs, grad_outputs, {}, true);
}

void Tensor::backward(const Tensor& grad_output, bool retain_graph, bool create_graph,
                      const Loc& loc) const {
  kiln::backward({*this}, {grad_output}, retain_graph, create_graph, loc);
}

}  // namespace kiln
