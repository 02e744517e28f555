#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::autograd {

class Node;

// Where a gradient goes: input slot `input_nr` of `fn`.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
};

// A tensor kept for backward, with the version it had when saved, so that an in-place change is
// caught (and both the saving and the modifying op are named).
class SavedTensor {
 public:
  SavedTensor() = default;
  // An input is kept by handle; an output is kept without its grad_fn (which is the node saving it:
  // a cycle) and gets it back on unpack.
  SavedTensor(const Tensor& t, bool is_output);
  Tensor unpack(const std::shared_ptr<Node>& saver) const;
  bool defined() const { return data_.defined(); }
  void reset() { data_ = Tensor(); }

 private:
  Tensor data_;
  bool is_output_ = false;
  bool requires_grad_ = false;
  uint32_t output_nr_ = 0;
  uint64_t version_ = 0;
};

// A node of the tape: receives the gradients of its op's outputs and produces the gradients of the
// op's inputs, sent along next_edges.
class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // grads has one entry per output of the op (zeros filled in where nothing flowed).
  virtual std::vector<Tensor> apply(std::vector<Tensor> grads) = 0;
  virtual void release_saved() {}
  virtual size_t num_outputs() const { return 1; }

  std::vector<Edge> next_edges;
  Loc loc;                   // where the op was called
  uint64_t sequence_nr = 0;  // creation order; later nodes run first
  // Hooks registered on a non-leaf output tensor, per output slot.
  std::vector<std::vector<GradHook>> output_hooks;
  bool released = false;
};

// The node of an op recorded by the dispatcher.
class OpNode final : public Node {
 public:
  OpNode(OpPtr op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
         const Loc& loc);
  std::string name() const override;
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;
  void release_saved() override;
  size_t num_outputs() const override { return output_metas_.size(); }
  const OpPtr& op() const { return op_; }
  // Called by the recorder once the outputs carry this node as grad_fn.
  void save_outputs(const std::vector<Tensor>& outputs);
  // The sizes of output `output` as a trace sees it (the tracer calls this once it has bound the
  // output; Note [size-free backward]): a gradient that never reached it is zeros of these sizes.
  void set_output_sizes(size_t output, SymSizes sizes);
  // The op's symbolic attrs as the trace recorded them (VjpContext::sym_attr).
  void set_sym_attrs(SymAttrs attrs);

 private:
  OpPtr op_;
  std::vector<TensorMeta> input_metas_, output_metas_;
  // The inputs' and outputs' sizes as a trace saw them (Note [size-free backward]); empty outside
  // traces.
  std::vector<SymSizes> input_sizes_, output_sizes_;
  SymAttrs sym_attrs_;
  std::vector<SavedTensor> saved_inputs_, saved_outputs_;
  std::vector<bool> needs_grad_;
};

// Adds the incoming gradient into a leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;
  Tensor leaf() const { return Tensor(leaf_.lock()); }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// Deleter for tape nodes: frees long chains iteratively (Note [iterative graph deletion]).
void delete_node(Node* node);

// The edge a gradient for `t` must follow: its grad_fn, or its leaf accumulator.
Edge gradient_edge(const Tensor& t);
uint64_t next_sequence_nr();

}  // namespace kiln::autograd
