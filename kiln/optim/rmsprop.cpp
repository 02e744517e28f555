#include "kiln/optim/rmsprop.h"

#include "kiln/ops/op_factory.h"
#include "kiln/ops/optimizer_update.h"
#include "kiln/optim/optimizer_helpers.h"

namespace kiln::optim {

namespace {

nlohmann::json rmsprop_defaults(const RMSpropOptions& o) {
  return {{"lr", o.lr},
          {"alpha", o.alpha},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"centered", o.centered},
          {"maximize", o.maximize}};
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options, const Loc& loc)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, options, loc) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options, const Loc& loc)
    : Optimizer(rmsprop_defaults(options)) {
  add_param_groups(std::move(groups), loc);
}

void RMSprop::validate(const nlohmann::json& o, const std::string& op, const Loc& loc) const {
  for (const char* key : {"lr", "alpha", "eps", "weight_decay", "momentum"})
    detail::option_nonnegative(o, key, op, loc);
  detail::option_flag(o, "centered", op, loc);
  detail::option_flag(o, "maximize", op, loc);
}

void RMSprop::update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                     ParamState& state) {
  const double momentum = group.number("momentum");
  const bool centered = group.flag("centered");
  if (!state.tensors.count("square_avg")) state.tensors["square_avg"] = detail::zeros_state(param);
  if (momentum > 0 && !state.tensors.count("momentum_buffer"))
    state.tensors["momentum_buffer"] = detail::zeros_state(param);
  if (centered && !state.tensors.count("grad_avg"))
    state.tensors["grad_avg"] = detail::zeros_state(param);
  state.initialized = true;
  ++state.step;
  nlohmann::json attrs = {{"lr", attr_double(group.number("lr"))},
                          {"alpha", attr_double(group.number("alpha"))},
                          {"eps", attr_double(group.number("eps"))},
                          {"weight_decay", attr_double(group.number("weight_decay"))},
                          {"momentum", attr_double(momentum)},
                          {"centered", centered},
                          {"maximize", group.flag("maximize")}};
  std::vector<Tensor> tensors{param, grad, state.tensors.at("square_avg")};
  if (momentum > 0) tensors.push_back(state.tensors.at("momentum_buffer"));
  if (centered) tensors.push_back(state.tensors.at("grad_avg"));
  kiln::detail::optimizer_update(kiln::detail::OptimizerUpdate::kRmsprop, std::move(attrs), tensors,
                                 step_loc());
}

}  // namespace kiln::optim
