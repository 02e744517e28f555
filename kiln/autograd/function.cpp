// Custom functions (see Note [custom functions] in function.h).
#include "kiln/autograd/function.h"

#include "kiln/core/call_site.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::autograd {

namespace {

// Note [function op]: a custom function's call goes through the dispatcher as one op named
// after the function (kName), whose attrs are the function's attrs, so a tracer or a profiler
// sees it like any op, and the ops its forward runs stay inside it (Note [composite ops]).
// Its output metadata is known only by running it, so infer runs the forward (on meta inputs
// that is the function's shape inference) and keeps the results for forward(), which hands them
// over; an op dispatched again without its infer (a graph executor) runs the forward itself.
// The tape does not record it (differentiable() is false): apply_function attaches the
// FunctionNode, which owns the context the forward filled, as the outputs' grad_fn. A function
// registered with KILN_REGISTER_FUNCTION is rebuilt from (name, attrs) by make_op.
class FunctionOp final : public Op {
 public:
  FunctionOp(const char* name, FunctionForward forward, nlohmann::json attrs,
             std::weak_ptr<FunctionNode> node)
      : name_(name), forward_(forward), attrs_(std::move(attrs)), node_(std::move(node)) {}
  const char* name() const override { return name_; }
  nlohmann::json attrs() const override { return attrs_; }
  bool differentiable() const override { return false; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    std::vector<Tensor> out = run(in, loc);
    std::vector<TensorMeta> metas;
    for (const Tensor& t : out)
      metas.push_back(
          {t.shape(), t.dtype(), t.device(),
           t.is_channels_last() ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous});
    tls_result() = {this, in, std::move(out)};
    return metas;
  }

  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>&) const override {
    Result& r = tls_result();
    bool same = r.op == this && r.inputs.size() == in.size();
    for (size_t i = 0; same && i < in.size(); ++i) same = r.inputs[i].is_same(in[i]);
    if (!same) return run(in, kernel_call_site());
    std::vector<Tensor> out = std::move(r.outputs);
    r = {};
    return out;
  }

  // What infer left for forward on this thread (released by apply_function after the call).
  struct Result {
    const FunctionOp* op = nullptr;
    std::vector<Tensor> inputs, outputs;
  };
  static Result& tls_result() {
    thread_local Result r;
    return r;
  }

 private:
  std::vector<Tensor> run(const std::vector<Tensor>& in, const Loc& loc) const {
    std::shared_ptr<FunctionNode> node = node_.lock();
    FunctionCtx fresh;
    if (!node) {
      fresh.attrs = attrs_;
      fresh.needs_input_grad.assign(in.size(), false);
    }
    FunctionCtx& ctx = node ? node->ctx() : fresh;
    std::vector<Tensor> out;
    {
      detail::CompositeScope scope;
      out = forward_(ctx, in);
    }
    for (size_t i = 0; i < out.size(); ++i)
      if (!out[i].defined())
        fail(name_, loc, "expected forward to return defined tensors, but output {} is undefined",
             i);
    return out;
  }

  const char* name_;
  FunctionForward forward_;
  nlohmann::json attrs_;
  std::weak_ptr<FunctionNode> node_;  // the call's node (none for a rebuilt op)
};

}  // namespace

bool register_function(const char* name, FunctionForward forward) {
  return register_op(OpDefinition{name,  // A custom function's own ops are each cast as their
                                         // policies say; the function is not.
                                  OpSchema{{"inputs..."}, {"outputs..."}, AutocastPolicy::kKeep},
                                  [name, forward](const Attrs& a) -> OpPtr {
                                    return std::make_shared<const FunctionOp>(
                                        name, forward, a.json(), std::weak_ptr<FunctionNode>());
                                  }});
}

// Defined in node.cpp (Note [iterative graph deletion]); not yet exported by node.h.

void FunctionCtx::save_for_backward(std::vector<Tensor> tensors) {
  pending_ = std::move(tensors);
}

std::vector<Tensor> FunctionCtx::saved_tensors() const {
  if (!node_) return pending_;  // still inside forward, or nothing was recorded
  std::shared_ptr<Node> self = node_->shared_from_this();
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  for (const SavedTensor& s : saved_) out.push_back(s.unpack(self));
  return out;
}

FunctionNode::FunctionNode(const char* name, FunctionBackward backward,
                           const std::vector<Tensor>& inputs, bool record, const Loc& call_loc)
    : name_(name), backward_(backward) {
  loc = user_location(call_loc);
  sequence_nr = next_sequence_nr();
  for (const Tensor& t : inputs) {
    input_metas_.push_back({t.shape(), t.dtype(), t.device()});
    bool needs = record && t.requires_grad();
    ctx_.needs_input_grad.push_back(needs);
    next_edges.push_back(needs ? gradient_edge(t) : Edge{});
  }
}

void FunctionNode::attach(std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> originals = outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    // An output that is an input (or an earlier output) gets its own handle, so that giving it
    // this node as grad_fn does not rewrite the history of the caller's tensor.
    bool aliased = false;
    for (const Tensor& t : inputs) aliased = aliased || t.is_same(outputs[i]);
    for (size_t j = 0; j < i; ++j) aliased = aliased || originals[j].is_same(outputs[i]);
    if (aliased || !outputs[i].is_leaf() || outputs[i].requires_grad())
      outputs[i] = detach(outputs[i]);
    output_metas_.push_back({outputs[i].shape(), outputs[i].dtype(), outputs[i].device()});
    if (!is_floating(outputs[i].dtype())) continue;  // integer outputs have no gradient
    AutogradMeta& meta = outputs[i].impl()->autograd();
    meta.grad_fn = shared_from_this();
    meta.output_nr = static_cast<uint32_t>(i);
  }
  output_hooks.resize(outputs.size());
  // Outputs are kept without their grad_fn (this node: a cycle); anything else by handle.
  for (const Tensor& t : ctx_.pending_) {
    if (!t.defined()) {
      ctx_.saved_.emplace_back();
      continue;
    }
    size_t k = 0;
    while (k < originals.size() && !originals[k].is_same(t)) ++k;
    ctx_.saved_.emplace_back(k < originals.size() ? SavedTensor(outputs[k], true)
                                                  : SavedTensor(t, false));
  }
  ctx_.pending_.clear();
  ctx_.node_ = this;
}

void FunctionNode::release_saved() {
  bool had_saved = false;
  for (SavedTensor& s : ctx_.saved_) {
    had_saved = had_saved || s.defined();
    s.reset();
  }
  if (had_saved) released = true;
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor> grads) {
  if (released)
    fail("backward", Loc::current(),
         "tried to backward through the graph a second time, through '{}' (called at {}), whose "
         "saved tensors were freed by the first backward. Pass retain_graph=true to the first "
         "backward() or grad() to keep them",
         name(), format_location(loc));
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined())
      grads[i] = zeros(output_metas_[i].shape, {output_metas_[i].dtype, output_metas_[i].device});
  std::vector<Tensor> result = backward_(ctx_, grads);
  if (result.size() != input_metas_.size())
    fail(name_, loc,
         "expected backward to return one gradient per input of forward ({}), but it returned {}",
         input_metas_.size(), result.size());
  for (size_t i = 0; i < result.size(); ++i) {
    const TensorMeta& m = input_metas_[i];
    if (!ctx_.needs_input_grad[i] || !result[i].defined()) {
      result[i] = Tensor();
      continue;
    }
    Tensor& g = result[i];
    if (g.shape() != m.shape || g.device() != m.device || !is_floating(g.dtype()))
      fail(name_, loc,
           "expected backward to return a gradient for input {} like the input ({}{} on {}), but "
           "got {}",
           i, dtype_name(m.dtype), shape_str(m.shape), m.device.name(), g.describe());
    if (g.dtype() != m.dtype) g = to_dtype(g, m.dtype, loc);
  }
  return result;
}

std::vector<Tensor> apply_function(const char* name, FunctionForward forward,
                                   FunctionBackward backward, const std::vector<Tensor>& inputs,
                                   nlohmann::json attrs, const Loc& loc) {
  bool record = GradMode::is_enabled();
  bool any_requires_grad = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      fail(name, loc, "expected a defined tensor as input {}, but got an undefined one", i);
    any_requires_grad = any_requires_grad || inputs[i].requires_grad();
  }
  record = record && any_requires_grad;
  // The node exists from the start so that forward sees needs_input_grad; it is dropped unless
  // the call is recorded.
  std::shared_ptr<FunctionNode> node(new FunctionNode(name, backward, inputs, record, loc),
                                     &delete_node);
  FunctionCtx& ctx = node->ctx();
  ctx.attrs = std::move(attrs);
  // Anomaly mode checks the outputs like any op's (Note [function op]).
  struct ReleaseResult {
    ~ReleaseResult() { FunctionOp::tls_result() = {}; }
  } release;
  std::vector<Tensor> outputs =
      dispatch(std::make_shared<const FunctionOp>(name, forward, ctx.attrs, node), inputs, loc);
  if (record) node->attach(outputs, inputs);
  return outputs;
}

}  // namespace kiln::autograd
