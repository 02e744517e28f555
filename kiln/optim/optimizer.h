#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

// Parameters that share hyperparameters. `options` holds them under PyTorch's names ("lr",
// "momentum", "betas", ...); keys a group leaves out are filled from the optimizer's defaults.
// LR schedulers read and write these options and add their own keys ("initial_lr", "max_lr"), as
// PyTorch's do.
struct ParamGroup {
  std::vector<Tensor> params;
  nlohmann::json options = nlohmann::json::object();

  double lr(const Loc& loc = Loc::current()) const { return number("lr", loc); }
  void set_lr(double lr) { options["lr"] = lr; }
  // The option `key` as a number / a bool; throws kiln::Error when it is missing or mistyped.
  double number(const std::string& key, const Loc& loc = Loc::current()) const;
  bool flag(const std::string& key, const Loc& loc = Loc::current()) const;
};

// What an optimizer keeps per parameter between steps.
struct ParamState {
  bool initialized = false;               // set by the first step that saw a gradient
  int64_t step = 0;                       // steps taken with a gradient
  std::map<std::string, Tensor> tensors;  // "exp_avg", "momentum_buffer", ...
};

// A snapshot of an optimizer: hyperparameters, step counts and shapes as JSON (`meta`), and the
// state tensors by name "state.<group>.<param>.<name>", e.g. "state.0.2.exp_avg". The tensors are
// copies, so training on after state_dict() leaves a snapshot unchanged.
struct OptimizerState {
  nlohmann::json meta;
  std::map<std::string, Tensor> tensors;
};

// Base of the optimizers (torch.optim semantics). Parameters must be leaf tensors that require
// grad; a parameter whose .grad() is undefined at step() is skipped and its state left as is.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", ...: names the optimizer in errors and in state dicts.
  virtual const char* name() const = 0;

  // Updates every parameter that has a gradient, in place and without recording history.
  void step(const Loc& loc = Loc::current());
  // Re-evaluates the loss with gradients enabled, then steps; returns the loss.
  Tensor step(const std::function<Tensor()>& closure, const Loc& loc = Loc::current());
  // set_to_none drops the gradients (PyTorch 2's default); otherwise they are zeroed in place.
  void zero_grad(bool set_to_none = true);

  void add_param_group(ParamGroup group, const Loc& loc = Loc::current());
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const nlohmann::json& defaults() const { return defaults_; }
  const ParamState& state(size_t group, size_t param, const Loc& loc = Loc::current()) const;

  OptimizerState state_dict() const;
  // Replaces hyperparameters and state with the snapshot's. Everything is validated before
  // anything changes: the optimizer type, the group and parameter counts, every shape and every
  // state tensor name must match; an error names the first mismatch.
  void load_state_dict(const OptimizerState& state, const Loc& loc = Loc::current());

 protected:
  explicit Optimizer(nlohmann::json defaults) : defaults_(std::move(defaults)) {}
  // Derived constructors call this last, so that validate()/init_state() dispatch to them.
  void add_param_groups(std::vector<ParamGroup> groups, const Loc& loc);

  // Updates one parameter in place; runs under NoGradGuard for parameters with a gradient. `grad`
  // is contiguous, of the parameter's dtype and shape.
  virtual void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                      ParamState& state) = 0;
  // Checks a group's option values (throws kiln::Error with `op` and `loc`).
  virtual void validate(const nlohmann::json& options, const std::string& op,
                        const Loc& loc) const = 0;
  // Runs when a parameter joins; Adagrad creates its accumulator here, as PyTorch does.
  virtual void init_state(const ParamGroup&, const Tensor&, ParamState&) {}
  // The call site of the running step(), recorded as the writer of the updated parameters.
  const Loc& step_loc() const { return step_loc_; }

 private:
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // parallel to groups_[g].params
  nlohmann::json defaults_;
  Loc step_loc_;
};

}  // namespace kiln::optim
