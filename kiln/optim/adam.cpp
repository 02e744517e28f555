#include "kiln/optim/adam.h"

#include "kiln/ops/op_factory.h"
#include "kiln/ops/optimizer_update.h"
#include "kiln/optim/optimizer_helpers.h"

namespace kiln::optim {

namespace {

template <class O>
nlohmann::json adam_defaults(const O& o) {
  return {{"lr", o.lr},           {"betas", {o.betas[0], o.betas[1]}},
          {"eps", o.eps},         {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad}, {"maximize", o.maximize}};
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params)}};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options, const Loc& loc)
    : Adam(one_group(std::move(params)), options, loc) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, const Loc& loc)
    : Optimizer(adam_defaults(options)) {
  add_param_groups(std::move(groups), loc);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options, const Loc& loc)
    : AdamW(one_group(std::move(params)), options, loc) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options, const Loc& loc)
    : Adam(adam_defaults(options)) {
  add_param_groups(std::move(groups), loc);
}

void Adam::validate(const nlohmann::json& o, const std::string& op, const Loc& loc) const {
  detail::option_nonnegative(o, "lr", op, loc);
  detail::option_nonnegative(o, "eps", op, loc);
  detail::option_nonnegative(o, "weight_decay", op, loc);
  detail::option_flag(o, "amsgrad", op, loc);
  detail::option_flag(o, "maximize", op, loc);
  const nlohmann::json& betas = o.contains("betas") ? o["betas"] : nlohmann::json();
  if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number())
    fail(op, loc, "expected 'betas' to be two numbers, but got {}", betas.dump());
  for (int k = 0; k < 2; ++k) {
    double b = betas[k].get<double>();
    if (!(b >= 0.0 && b < 1.0)) fail(op, loc, "expected 0 <= betas[{}] < 1, but got {}", k, b);
  }
}

void Adam::update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                  ParamState& state) {
  const bool amsgrad = group.flag("amsgrad");
  for (const char* key : {"exp_avg", "exp_avg_sq"})
    if (!state.tensors.count(key)) state.tensors[key] = detail::zeros_state(param);
  if (amsgrad && !state.tensors.count("max_exp_avg_sq"))
    state.tensors["max_exp_avg_sq"] = detail::zeros_state(param);
  state.initialized = true;
  const int64_t step = ++state.step;
  nlohmann::json attrs = {{"lr", attr_double(group.number("lr"))},
                          {"beta1", attr_double(group.options["betas"][0].get<double>())},
                          {"beta2", attr_double(group.options["betas"][1].get<double>())},
                          {"eps", attr_double(group.number("eps"))},
                          {"weight_decay", attr_double(group.number("weight_decay"))},
                          {"amsgrad", amsgrad},
                          {"maximize", group.flag("maximize")},
                          {"decoupled", decoupled_weight_decay()},
                          {"step", step}};
  std::vector<Tensor> tensors{param, grad, state.tensors.at("exp_avg"),
                              state.tensors.at("exp_avg_sq")};
  if (amsgrad) tensors.push_back(state.tensors.at("max_exp_avg_sq"));
  kiln::detail::optimizer_update(kiln::detail::OptimizerUpdate::kAdam, std::move(attrs), tensors,
                                 step_loc());
}

}  // namespace kiln::optim
