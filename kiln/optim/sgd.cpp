#include "kiln/optim/sgd.h"

#include "kiln/ops/op_factory.h"
#include "kiln/ops/optimizer_update.h"
#include "kiln/optim/optimizer_helpers.h"

namespace kiln::optim {

namespace {

nlohmann::json sgd_defaults(const SGDOptions& o) {
  return {{"lr", o.lr ? nlohmann::json(*o.lr) : nlohmann::json()},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov},
          {"maximize", o.maximize}};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options, const Loc& loc)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, options, loc) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options, const Loc& loc)
    : Optimizer(sgd_defaults(options)) {
  add_param_groups(std::move(groups), loc);
}

void SGD::validate(const nlohmann::json& o, const std::string& op, const Loc& loc) const {
  if (!o.contains("lr") || !o["lr"].is_number())
    fail(op, loc,
         "expected a learning rate 'lr' (SGD has no default, as in PyTorch; set SGDOptions::lr "
         "or the group's \"lr\"), but got {}",
         o.contains("lr") ? o["lr"].dump() : "none");
  detail::option_nonnegative(o, "lr", op, loc);
  double momentum = detail::option_nonnegative(o, "momentum", op, loc);
  double dampening = detail::option_number(o, "dampening", op, loc);
  detail::option_nonnegative(o, "weight_decay", op, loc);
  detail::option_flag(o, "maximize", op, loc);
  if (detail::option_flag(o, "nesterov", op, loc) && (momentum <= 0 || dampening != 0))
    fail(op, loc,
         "expected momentum > 0 and dampening == 0 for Nesterov momentum, but got momentum {} "
         "and dampening {}",
         momentum, dampening);
}

void SGD::update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                 ParamState& state) {
  const double momentum = group.number("momentum");
  bool first = false;
  if (momentum != 0) {
    first = !state.tensors.count("momentum_buffer");
    if (first) state.tensors["momentum_buffer"] = detail::zeros_state(param);
  }
  state.initialized = true;
  ++state.step;
  nlohmann::json attrs = {{"lr", attr_double(group.number("lr"))},
                          {"momentum", attr_double(momentum)},
                          {"dampening", attr_double(group.number("dampening"))},
                          {"weight_decay", attr_double(group.number("weight_decay"))},
                          {"nesterov", group.flag("nesterov")},
                          {"maximize", group.flag("maximize")},
                          {"first_step", first}};
  std::vector<Tensor> tensors{param, grad};
  if (momentum != 0) tensors.push_back(state.tensors.at("momentum_buffer"));
  kiln::detail::optimizer_update(kiln::detail::OptimizerUpdate::kSgd, std::move(attrs), tensors,
                                 step_loc());
}

}  // namespace kiln::optim
