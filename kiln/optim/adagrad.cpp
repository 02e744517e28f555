#include "kiln/optim/adagrad.h"

#include "kiln/ops/op_factory.h"
#include "kiln/ops/optimizer_update.h"
#include "kiln/optim/optimizer_helpers.h"

namespace kiln::optim {

namespace {

nlohmann::json adagrad_defaults(const AdagradOptions& o) {
  return {{"lr", o.lr},
          {"lr_decay", o.lr_decay},
          {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value},
          {"eps", o.eps},
          {"maximize", o.maximize}};
}

}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options, const Loc& loc)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, options, loc) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options, const Loc& loc)
    : Optimizer(adagrad_defaults(options)) {
  add_param_groups(std::move(groups), loc);
}

void Adagrad::validate(const nlohmann::json& o, const std::string& op, const Loc& loc) const {
  for (const char* key : {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"})
    detail::option_nonnegative(o, key, op, loc);
  detail::option_flag(o, "maximize", op, loc);
}

void Adagrad::init_state(const ParamGroup& group, const Tensor& param, ParamState& state) {
  state.tensors["sum"] = detail::zeros_state(param, group.number("initial_accumulator_value"));
}

void Adagrad::update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                     ParamState& state) {
  if (!state.tensors.count("sum")) init_state(group, param, state);
  state.initialized = true;
  const int64_t step = ++state.step;
  nlohmann::json attrs = {{"lr", attr_double(group.number("lr"))},
                          {"lr_decay", attr_double(group.number("lr_decay"))},
                          {"weight_decay", attr_double(group.number("weight_decay"))},
                          {"eps", attr_double(group.number("eps"))},
                          {"maximize", group.flag("maximize")},
                          {"step", step}};
  kiln::detail::optimizer_update(kiln::detail::OptimizerUpdate::kAdagrad, std::move(attrs),
                                 {param, grad, state.tensors.at("sum")}, step_loc());
}

}  // namespace kiln::optim
