#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/regularizer.h"

namespace kiln::nn {

// Ordered (name, tensor) pairs: what state_dict() returns and load_state_dict() reads.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module;
using ModulePtr = std::shared_ptr<Module>;
// Called after forward with (module, input, output); see Module::register_forward_hook.
using ForwardHook = std::function<void(Module&, const Tensor&, const Tensor&)>;

// Note [module state]
// ~~~~~~~~~~~~~~~~~~~
// As torch.nn.Module: a module owns parameters (leaf tensors that require grad), buffers (state
// that is not trained, such as running_mean) and submodules, each registered under a name in
// insertion order. Layers also keep the handles as public members (linear.weight); a handle and
// the registered tensor share one TensorImpl, so code that must swap a tensor's memory (to(DType),
// summary's meta forward) changes the impl in place and every handle sees it, like assigning
// `param.data` in PyTorch.
class Module {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The layer's class name ("Linear"), used by summary and error messages.
  const std::string& type_name() const { return type_name_; }

  virtual Tensor forward(const Tensor& input);
  // forward followed by the forward hooks; errors raised inside name the caller's line (loc).
  Tensor operator()(const Tensor& input, const Loc& loc = Loc::current());

  // Several inputs and outputs (a two-tower model, attention's query/key/value), as PyTorch's
  // forward(*args) and Keras' functional models with several inputs: override forward_many. The
  // default accepts exactly one input and calls forward. model({x, y}) calls it; forward hooks
  // see the first input and the first output.
  virtual std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs);
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs,
                                 const Loc& loc = Loc::current());

  // --- registration (names must be new, non-empty and free of '.') --------------------------
  // Registers a leaf tensor; requires_grad is set on it. Returns the stored handle.
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true,
                             const Loc& loc = Loc::current());
  // Non-persistent buffers are left out of state_dict.
  Tensor& register_buffer(const std::string& name, Tensor t, bool persistent = true,
                          const Loc& loc = Loc::current());
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module,
                                     const Loc& loc = Loc::current()) {
    add_module(name, module, loc);
    return module;
  }

  // --- traversal (recursive, dotted names: "features.0.weight") -----------------------------
  // Parameters shared by several submodules are listed once (at their first name).
  StateDict named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  StateDict named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  // This module first (name ""), then every descendant depth first.
  std::vector<std::pair<std::string, Module*>> named_modules() const;
  // Direct submodules only.
  const std::vector<std::pair<std::string, ModulePtr>>& named_children() const { return children_; }
  // Calls fn on every descendant, then on this module (PyTorch's order).
  void apply(const std::function<void(Module&)>& fn);

  int64_t num_parameters(bool trainable_only = false) const;

  // --- mode ----------------------------------------------------------------------------------
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // --- state ---------------------------------------------------------------------------------
  // Parameters and persistent buffers, detached (they share memory with the module).
  StateDict state_dict() const;
  // Copies values in place (no gradient recorded). Every problem is collected and reported in
  // one error: missing keys, unexpected keys (both ignored when strict is false), shape and dtype
  // mismatches (always errors).
  void load_state_dict(const StateDict& entries, bool strict = true,
                       const Loc& loc = Loc::current());

  // Drops (set_to_none) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);
  // Converts floating-point parameters and buffers to dtype in place (handles stay valid);
  // integer buffers such as num_batches_tracked keep their dtype, as in PyTorch.
  Module& to(DType dtype, const Loc& loc = Loc::current());

  // --- regularizers (Note [regularizers] in regularizer.h) ------------------------------------
  // Attaches a Keras-style penalty to a parameter, named as named_parameters() lists it: the
  // module's own ("weight") or a descendant's ("fc1.weight"); the owning module keeps it.
  // Several may be attached to one parameter (their terms add up). An unknown name is an error
  // naming this module and listing its parameters.
  void add_regularizer(const std::string& param_name, Regularizer regularizer,
                       const Loc& loc = Loc::current());
  // The sum of every attached penalty over this module and its descendants (a shared submodule
  // counts once), on the parameters' current values, recorded for autograd like any op. An
  // undefined Tensor when nothing is attached anywhere, so callers can skip it.
  Tensor regularization_loss(const Loc& loc = Loc::current()) const;

  // --- hooks ---------------------------------------------------------------------------------
  // Returns an id for remove_forward_hook.
  int64_t register_forward_hook(ForwardHook hook);
  void remove_forward_hook(int64_t id);
  bool has_forward_hooks() const { return !hooks_.empty(); }

 protected:
  void add_module(const std::string& name, ModulePtr module, const Loc& loc);

 private:
  struct Buffer {
    std::string name;
    Tensor tensor;
    bool persistent;
  };
  void check_new_name(const std::string& what, const std::string& name, const Loc& loc) const;
  void collect_parameters(const std::string& prefix, StateDict& out,
                          std::vector<const TensorImpl*>& seen) const;
  void collect_buffers(const std::string& prefix, bool persistent_only, StateDict& out) const;
  void collect_modules(const std::string& prefix,
                       std::vector<std::pair<std::string, Module*>>& out) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  std::vector<std::pair<int64_t, ForwardHook>> hooks_;
  std::vector<std::pair<std::string, Regularizer>> regularizers_;  // (own parameter, penalty)
  int64_t next_hook_id_ = 0;
};

// Points `dst`'s TensorImpl at `src`'s memory, shape and dtype (src must not require grad). Every
// handle of dst sees the change; dst keeps its autograd flags, its gradient is dropped.
void replace_tensor_data(const Tensor& dst, const Tensor& src);

}  // namespace kiln::nn
