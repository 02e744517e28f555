#include "kiln/autograd/node.h"

#include <algorithm>

#include <atomic>

#include "kiln/core/allocator.h"
#include "kiln/core/call_site.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

SavedTensor::SavedTensor(const Tensor& t, bool is_output)
    : is_output_(is_output),
      requires_grad_(t.requires_grad()),
      output_nr_(t.output_nr()),
      version_(t.version()) {
  data_ = is_output ? detach(t) : t;
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& saver) const {
  if (!data_.defined()) return Tensor();
  const Storage& storage = *data_.storage();
  if (storage.version() != version_)
    fail("backward", Loc::current(),
         "a tensor saved for the gradient of '{}' (called at {}) was modified in place by '{}' at "
         "{}: {} was saved at version {} and is now at version {}. Clone it before the in-place "
         "op, or use the out-of-place op",
         saver->name(), format_location(saver->loc), storage.last_writer_op(),
         format_location(storage.last_writer_loc()), data_.describe(), version_, storage.version());
  if (!is_output_) return data_;
  // Re-attach the output to its producer so that create_graph sees the real history.
  Tensor out = detach(data_);
  if (requires_grad_) {
    AutogradMeta& meta = out.impl()->autograd();
    meta.grad_fn = saver;
    meta.output_nr = output_nr_;
  }
  return out;
}

OpNode::OpNode(OpPtr op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
               const Loc& call_loc)
    : op_(std::move(op)) {
  loc = call_loc;
  sequence_nr = next_sequence_nr();
  const bool traced = detail::sizes_are_traced();
  if (traced) input_sizes_.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (traced) input_sizes_.push_back(sym_sizes(t));
    input_metas_.push_back({t.shape(), t.dtype(), t.device()});
    needs_grad_.push_back(t.requires_grad());
    next_edges.push_back(t.requires_grad() ? gradient_edge(t) : Edge{});
  }
  const Op::Saves saves = op_->saves_for(needs_grad_);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool keep = saves.inputs && (i >= 64 || ((saves.input_mask >> i) & 1));
    saved_inputs_.emplace_back(keep ? SavedTensor(inputs[i], false) : SavedTensor());
  }
  for (const Tensor& t : outputs) output_metas_.push_back({t.shape(), t.dtype(), t.device()});
  output_hooks.resize(outputs.size());
}

void OpNode::set_sym_attrs(SymAttrs attrs) {
  sym_attrs_ = std::move(attrs);
}

void OpNode::set_output_sizes(size_t output, SymSizes sizes) {
  if (output >= output_metas_.size()) return;
  output_sizes_.resize(output_metas_.size());
  output_sizes_[output] = std::move(sizes);
}

void OpNode::save_outputs(const std::vector<Tensor>& outputs) {
  const Op::Saves saves = op_->saves_for(needs_grad_);
  if (!saves.outputs) return;
  saved_outputs_.clear();
  for (size_t i = 0; i < outputs.size(); ++i)
    saved_outputs_.emplace_back(
        i < 64 && !((saves.output_mask >> i) & 1) ? SavedTensor() : SavedTensor(outputs[i], true));
}

std::string OpNode::name() const {
  return op_->name();
}

void OpNode::release_saved() {
  bool had_saved = false;
  for (auto* list : {&saved_inputs_, &saved_outputs_})
    for (SavedTensor& s : *list) {
      had_saved = had_saved || s.defined();
      s.reset();
    }
  if (had_saved) released = true;
}

std::vector<Tensor> OpNode::apply(std::vector<Tensor> grads) {
  if (released)
    fail("backward", Loc::current(),
         "tried to backward through the graph a second time, through '{}' (called at {}), whose "
         "saved tensors were freed by the first backward. Pass retain_graph=true to the first "
         "backward() or grad() to keep them",
         name(), format_location(loc));
  // Zeros for a floating output no gradient reached; an integer or bool output (max_pool2d's
  // indices) has no gradient, stays undefined, and costs no tensor of its shape (which a traced
  // backward would bake as a size, Note [symbolic dims]).
  // Sized as the forward's trace saw the output where it can be (Note [size-free backward]).
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined() || !is_floating(output_metas_[i].dtype)) continue;
    const bool symbolic =
        i < output_sizes_.size() && !output_sizes_[i].empty() &&
        std::all_of(output_sizes_[i].begin(), output_sizes_[i].end(), kiln::detail::sym_usable);
    grads[i] = zeros(symbolic ? SizeList(output_sizes_[i]) : SizeList(output_metas_[i].shape),
                     {output_metas_[i].dtype, output_metas_[i].device});
  }
  auto self = shared_from_this();
  std::vector<Tensor> inputs, outputs;
  for (const SavedTensor& s : saved_inputs_) inputs.push_back(s.unpack(self));
  for (const SavedTensor& s : saved_outputs_) outputs.push_back(s.unpack(self));
  // The engine records the gradient's own history exactly when create_graph is set.
  VjpContext ctx{input_metas_,
                 inputs,
                 outputs,
                 grads,
                 needs_grad_,
                 loc,
                 GradMode::is_enabled(),
                 input_sizes_.empty() ? nullptr : &input_sizes_,
                 sym_attrs_.empty() ? nullptr : &sym_attrs_};
  std::vector<Tensor> result;
  // An error inside a vjp names the forward call as well as backward()'s line.
  const auto forward_call = [&] {
    return fmt::format(" (in the backward of '{}' called at {})", name(), format_location(loc));
  };
  try {
    result = op_->vjp(ctx);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(e.what() + forward_call(), e.detail());
  } catch (const Error& e) {
    throw Error(e.what() + forward_call());
  }
  KILN_INTERNAL_ASSERT(result.size() == input_metas_.size(),
                       std::string(op_->name()) + " vjp returned a wrong number of gradients");
  for (size_t i = 0; i < result.size(); ++i) {
    if (!needs_grad_[i]) result[i] = Tensor();
    if (result[i].defined() && result[i].shape() != input_metas_[i].shape)
      throw InternalError(
          fmt::format("kiln internal error: vjp of '{}' returned {} for input {} of "
                      "shape {}",
                      name(), result[i].describe(), i, shape_str(input_metas_[i].shape)));
  }
  return result;
}

AccumulateGrad::AccumulateGrad(const Tensor& leaf) : leaf_(leaf.impl_ptr()) {
  sequence_nr = UINT64_MAX;  // leaves finish last
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grads) {
  Tensor leaf = this->leaf();
  if (!leaf.defined() || !grads[0].defined()) return {};
  Tensor& g = grads[0];
  Tensor old = leaf.grad();
  if (old.defined()) {
    leaf.set_grad(add(old, g));
  } else if (GradMode::is_enabled()) {
    leaf.set_grad(g);  // create_graph: the gradient keeps its history
  } else {
    // Never store memory that another tensor shares: a user's in-place zero_() on one .grad must
    // not change another's.
    bool unshared = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && !g.is_view();
    leaf.set_grad(unshared ? g : clone(g));
  }
  return {};
}

// Note [iterative graph deletion]: a node owns its predecessors (through next_edges, and through
// the grad_fn of the tensors it saved), so dropping the last tensor of a long chain (an RNN over
// many steps, a loop of 30k ops) would destroy the chain by recursion and overflow the stack.
// Nodes are created with this deleter, which takes over the predecessors that would die with a
// node and frees them in a loop, as PyTorch's deleteNode does.
void delete_node(Node* node) {
  std::vector<std::shared_ptr<Node>> stack;
  auto gather = [&stack](Node* n) {
    n->release_saved();  // may hold the last reference to a predecessor's output
    for (Edge& e : n->next_edges) {
      if (e.fn.use_count() == 1)
        stack.push_back(std::move(e.fn));
      else
        e.fn.reset();
    }
  };
  gather(node);
  delete node;
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    gather(n.get());  // emptied first, so its own deletion below does not recurse
  }
}

Edge gradient_edge(const Tensor& t) {
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  AutogradMeta& meta = t.impl()->autograd();
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace {

void record(const OpPtr& op, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
            const Loc& loc) {
  // An op called inside a layer is recorded at the user's line (Note [user call site]).
  std::shared_ptr<OpNode> node(new OpNode(op, inputs, outputs, user_location(loc)), &delete_node);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!is_floating(outputs[i].dtype())) continue;
    AutogradMeta& meta = outputs[i].impl()->autograd();
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
  node->save_outputs(outputs);
}

// The tape is a process-wide dispatch mode (Note [dispatch modes]): the ops layer sits below
// autograd, so autograd installs it at load time instead of ops including autograd.
class TapeMode final : public DispatchMode {
 public:
  const char* name() const override { return "tape"; }
  bool intercepts(const OpCall& call) const override {
    return should_record(*call.op, call.inputs);
  }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    std::vector<Tensor> outputs = next(call);
    record(call.op, call.inputs, outputs, call.loc);
    return outputs;
  }
};

const bool registered = (install_process_mode(kTapeRank, std::make_shared<TapeMode>()), true);

}  // namespace

}  // namespace kiln::autograd
