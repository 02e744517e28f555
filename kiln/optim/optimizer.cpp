#include "kiln/optim/optimizer.h"

#include <set>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/optim/optimizer_helpers.h"

namespace kiln::optim {

namespace {

// Keys that LR schedulers add to a group (as PyTorch's do); a group may carry them from the start
// when a scheduler resumes (last_epoch != -1).
const std::set<std::string> kSchedulerKeys = {"initial_lr", "max_lr", "min_lr", "max_momentum",
                                              "base_momentum"};

std::string keys_of(const nlohmann::json& object) {
  std::string out;
  for (auto it = object.begin(); it != object.end(); ++it)
    out += (out.empty() ? "" : ", ") + it.key();
  return out;
}

std::string state_key(size_t group, size_t param, const std::string& name) {
  return fmt::format("state.{}.{}.{}", group, param, name);
}

Shape shape_from_json(const nlohmann::json& j, const std::string& op, const std::string& what,
                      const Loc& loc) {
  if (!j.is_array()) fail(op, loc, "expected {} to be a list of sizes, but got {}", what, j.dump());
  Shape s;
  for (const auto& d : j) {
    if (!d.is_number_integer())
      fail(op, loc, "expected {} to be a list of sizes, but got {}", what, j.dump());
    s.push_back(d.get<int64_t>());
  }
  return s;
}

}  // namespace

double ParamGroup::number(const std::string& key, const Loc& loc) const {
  auto it = options.find(key);
  if (it == options.end() || !it->is_number())
    fail("optim", loc, "expected a number for the option '{}', but got {}", key,
         it == options.end() ? std::string("none") : it->dump());
  return it->get<double>();
}

bool ParamGroup::flag(const std::string& key, const Loc& loc) const {
  auto it = options.find(key);
  if (it == options.end() || !it->is_boolean())
    fail("optim", loc, "expected a bool for the option '{}', but got {}", key,
         it == options.end() ? std::string("none") : it->dump());
  return it->get<bool>();
}

namespace detail {

Tensor zeros_state(const Tensor& param, double value) {
  return full(param.shape(), value, TensorOptions{param.dtype()});
}

double option_number(const nlohmann::json& options, const std::string& key, const std::string& op,
                     const Loc& loc) {
  auto it = options.find(key);
  if (it == options.end() || !it->is_number())
    fail(op, loc, "expected a number for the option '{}', but got {}", key,
         it == options.end() ? std::string("none") : it->dump());
  return it->get<double>();
}

bool option_flag(const nlohmann::json& options, const std::string& key, const std::string& op,
                 const Loc& loc) {
  auto it = options.find(key);
  if (it == options.end() || !it->is_boolean())
    fail(op, loc, "expected true or false for the option '{}', but got {}", key,
         it == options.end() ? std::string("none") : it->dump());
  return it->get<bool>();
}

double option_nonnegative(const nlohmann::json& options, const std::string& key,
                          const std::string& op, const Loc& loc) {
  double v = option_number(options, key, op, loc);
  if (!(v >= 0.0)) fail(op, loc, "expected {} >= 0, but got {}", key, v);
  return v;
}

}  // namespace detail

void Optimizer::add_param_groups(std::vector<ParamGroup> groups, const Loc& loc) {
  size_t count = 0;
  for (const auto& g : groups) count += g.params.size();
  if (count == 0)
    fail(name(), loc, "expected at least one parameter to optimize, but got an empty list");
  for (auto& g : groups) add_param_group(std::move(g), loc);
}

void Optimizer::add_param_group(ParamGroup group, const Loc& loc) {
  const std::string op = name();
  const size_t index = groups_.size();
  if (!group.options.is_object())
    fail(op, loc, "expected the options of group {} to be a JSON object, but got {}", index,
         group.options.dump());
  for (auto it = group.options.begin(); it != group.options.end(); ++it)
    if (!defaults_.contains(it.key()) && !kSchedulerKeys.count(it.key()))
      fail(op, loc, "expected options of {} ({}), but got the unknown option '{}' in group {}", op,
           keys_of(defaults_), it.key(), index);
  for (auto it = defaults_.begin(); it != defaults_.end(); ++it)
    if (!group.options.contains(it.key())) group.options[it.key()] = it.value();
  validate(group.options, op, loc);

  std::set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params) seen.insert(p.impl());
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    if (!p.defined())
      fail(op, loc,
           "expected parameter {} of group {} to be a defined tensor, but got an "
           "undefined one",
           i, index);
    if (!p.is_leaf() || !p.requires_grad())
      fail(op, loc,
           "expected parameter {} of group {} to be a leaf tensor that requires grad, but got "
           "{} ({}; optimizers update leaves in place)",
           i, index, p.describe(), p.is_leaf() ? "requires_grad=false" : "a non-leaf");
    if (p.is_meta())
      fail(op, loc, "expected parameter {} of group {} to have memory, but got {}", i, index,
           p.describe());
    if (!seen.insert(p.impl()).second)
      fail(op, loc,
           "expected every parameter in one place only, but parameter {} of group {} ({}) "
           "appears twice",
           i, index, p.describe());
  }
  std::vector<ParamState> states(group.params.size());
  for (size_t i = 0; i < group.params.size(); ++i) init_state(group, group.params[i], states[i]);
  groups_.push_back(std::move(group));
  state_.push_back(std::move(states));
}

const ParamState& Optimizer::state(size_t group, size_t param, const Loc& loc) const {
  if (group >= state_.size() || param >= state_[group].size())
    fail(name(), loc,
         "expected a parameter index within the groups, but got group {} "
         "parameter {}",
         group, param);
  return state_[group][param];
}

void Optimizer::step(const Loc& loc) {
  NoGradGuard no_grad;
  const std::string op = std::string(name()) + ".step";
  step_loc_ = loc;
  for (size_t g = 0; g < groups_.size(); ++g) {
    // Options may have been edited since the last step (schedulers, users): check them again.
    validate(groups_[g].options, op, loc);
    if (groups_[g].params.size() != state_[g].size())
      fail(op, loc,
           "expected group {} to keep its {} parameters (add parameters with add_param_group), "
           "but got {}",
           g, state_[g].size(), groups_[g].params.size());
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      for (const auto& [key, t] : state_[g][i].tensors)
        if (t.shape() != p.shape() || t.dtype() != p.dtype())
          fail(op, loc,
               "expected parameter {} of group {} to keep the shape and dtype of its state "
               "'{}' ({}), but got {} (replace parameters only with equal ones)",
               i, g, key, t.describe(), p.describe());
      if (grad.shape() != p.shape() || grad.device() != p.device() || !is_floating(grad.dtype()))
        fail(op, loc,
             "expected the gradient of parameter {} of group {} to match the parameter {}, but "
             "got {}",
             i, g, p.describe(), grad.describe());
      Tensor dense = contiguous(to_dtype(grad.detach(), p.dtype()));
      update(groups_[g], p, dense, state_[g][i]);
    }
  }
}

Tensor Optimizer::step(const std::function<Tensor()>& closure, const Loc& loc) {
  Tensor loss;
  {
    EnableGradGuard enable;
    loss = closure();
  }
  step(loc);
  return loss;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& g : groups_) {
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        // Like PyTorch: cut the gradient's history, then zero its memory in place.
        Tensor cut = grad.detach();
        cut.zero_();
        p.set_grad(cut);
      }
    }
  }
}

OptimizerState Optimizer::state_dict() const {
  NoGradGuard no_grad;
  OptimizerState out;
  out.meta["optimizer"] = name();
  out.meta["param_groups"] = nlohmann::json::array();
  out.meta["state"] = nlohmann::json::array();
  for (size_t g = 0; g < groups_.size(); ++g) {
    nlohmann::json shapes = nlohmann::json::array();
    for (const auto& p : groups_[g].params) shapes.push_back(p.shape());
    out.meta["param_groups"].push_back({{"options", groups_[g].options}, {"shapes", shapes}});
    nlohmann::json states = nlohmann::json::array();
    for (size_t i = 0; i < state_[g].size(); ++i) {
      const ParamState& s = state_[g][i];
      if (!s.initialized && s.tensors.empty()) {
        states.push_back(nullptr);
        continue;
      }
      nlohmann::json names = nlohmann::json::array();
      for (const auto& [key, t] : s.tensors) {
        names.push_back(key);
        out.tensors[state_key(g, i, key)] = kiln::clone(t);
      }
      states.push_back({{"initialized", s.initialized}, {"step", s.step}, {"tensors", names}});
    }
    out.meta["state"].push_back(std::move(states));
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& sd, const Loc& loc) {
  const std::string op = std::string(name()) + ".load_state_dict";
  const nlohmann::json& meta = sd.meta;
  if (!meta.is_object() || !meta.contains("optimizer") || !meta["optimizer"].is_string())
    fail(op, loc, "expected a state dict with an \"optimizer\" name, but got {}",
         meta.is_object() ? keys_of(meta) : meta.dump());
  if (meta["optimizer"].get<std::string>() != name())
    fail(op, loc, "expected a state dict of {}, but got one of {}", name(),
         meta["optimizer"].get<std::string>());
  const nlohmann::json& groups = meta.value("param_groups", nlohmann::json());
  const nlohmann::json& states = meta.value("state", nlohmann::json());
  if (!groups.is_array() || groups.size() != groups_.size())
    fail(op, loc, "expected {} param groups, but got {}", groups_.size(),
         groups.is_array() ? std::to_string(groups.size()) : groups.dump());
  if (!states.is_array() || states.size() != groups_.size())
    fail(op, loc, "expected state for {} param groups, but got {}", groups_.size(),
         states.is_array() ? std::to_string(states.size()) : states.dump());

  // Validate everything first so that a bad snapshot leaves the optimizer untouched.
  std::set<std::string> expected_keys;
  std::vector<std::vector<ParamState>> new_state(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& params = groups_[g].params;
    const nlohmann::json& saved = groups[g];
    if (!saved.is_object() || !saved.contains("options") || !saved["options"].is_object())
      fail(op, loc, "expected group {} to have an options object, but got {}", g, saved.dump());
    const nlohmann::json& options = saved["options"];
    for (auto it = defaults_.begin(); it != defaults_.end(); ++it)
      if (!options.contains(it.key()))
        fail(op, loc, "expected group {} to have the option '{}', but got options {}", g, it.key(),
             keys_of(options));
    for (auto it = options.begin(); it != options.end(); ++it)
      if (!defaults_.contains(it.key()) && !kSchedulerKeys.count(it.key()))
        fail(op, loc, "expected options of {} ({}), but got the unknown option '{}' in group {}",
             name(), keys_of(defaults_), it.key(), g);
    validate(options, op, loc);
    const nlohmann::json& shapes = saved.value("shapes", nlohmann::json());
    if (!shapes.is_array() || shapes.size() != params.size())
      fail(op, loc, "expected group {} to have {} parameters, but got {}", g, params.size(),
           shapes.is_array() ? std::to_string(shapes.size()) : shapes.dump());
    if (!states[g].is_array() || states[g].size() != params.size())
      fail(op, loc, "expected state for the {} parameters of group {}, but got {}", params.size(),
           g, states[g].is_array() ? std::to_string(states[g].size()) : states[g].dump());
    new_state[g].resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string where = fmt::format("parameter {} of group {}", i, g);
      Shape shape = shape_from_json(shapes[i], op, "the shape of " + where, loc);
      if (shape != params[i].shape())
        fail(op, loc, "expected {} to have shape {} (the optimizer's {}), but got {}", where,
             shape_str(params[i].shape()), params[i].describe(), shape_str(shape));
      const nlohmann::json& entry = states[g][i];
      if (entry.is_null()) continue;
      if (!entry.is_object() || !entry.contains("step") || !entry["step"].is_number_integer() ||
          !entry.contains("tensors") || !entry["tensors"].is_array())
        fail(op, loc, "expected the state of {} to have \"step\" and \"tensors\", but got {}",
             where, entry.dump());
      ParamState& s = new_state[g][i];
      s.initialized = entry.value("initialized", true);
      s.step = entry["step"].get<int64_t>();
      for (const auto& n : entry["tensors"]) {
        if (!n.is_string())
          fail(op, loc, "expected state tensor names for {}, but got {}", where, n.dump());
        const std::string key = state_key(g, i, n.get<std::string>());
        auto it = sd.tensors.find(key);
        if (it == sd.tensors.end() || !it->second.defined())
          fail(op, loc, "expected the state tensor '{}', but got none", key);
        const Tensor& t = it->second;
        if (t.shape() != params[i].shape() || !is_floating(t.dtype()) || t.is_meta())
          fail(op, loc,
               "expected the state tensor '{}' to be floating with the shape of {} ({}), "
               "but got {}",
               key, where, params[i].describe(), t.describe());
        expected_keys.insert(key);
        s.tensors[n.get<std::string>()] = t;
      }
    }
  }
  for (const auto& [key, t] : sd.tensors)
    if (!expected_keys.count(key))
      fail(op, loc,
           "expected only the state tensors listed in the meta data, but got the "
           "unexpected tensor '{}' ({})",
           key, t.describe());

  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].options = groups[g]["options"];
    for (size_t i = 0; i < new_state[g].size(); ++i)
      for (auto& [key, t] : new_state[g][i].tensors)
        t = kiln::clone(to_dtype(t.detach(), groups_[g].params[i].dtype()));
  }
  state_ = std::move(new_state);
}

}  // namespace kiln::optim
