#include "kiln/optim/sgd.h"

#include "kiln/optim/update_kernels.h"
#include "kiln/optim/update_op.h"

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
  detail::run_update("sgd_update", std::move(attrs), tensors, step_loc());
}

namespace {

// t: param, grad[, momentum_buffer] (Note [optimizer updates are ops]). On the first step the
// buffer starts as the gradient, as in PyTorch.
void sgd_kernel(const Attrs& a, const std::vector<Tensor>& t) {
  const double lr = a.f("lr"), momentum = a.f("momentum"), dampening = a.f("dampening");
  const double weight_decay = a.f("weight_decay");
  const bool nesterov = a.b("nesterov"), maximize = a.b("maximize"), first = a.b("first_step");
  const Tensor& param = t[0];
  detail::visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = detail::data_of<T>(param);
    const T* g = detail::data_of<const T>(t[1]);
    T* b = momentum != 0 ? detail::data_of<T>(t[2]) : nullptr;
    const C wd = static_cast<C>(weight_decay), mom = static_cast<C>(momentum);
    const C keep = static_cast<C>(1 - dampening), neg_lr = static_cast<C>(-lr);
    detail::for_each_element(param.numel(), [&](int64_t i) {
      const C pi = static_cast<C>(p[i]);
      C d = static_cast<C>(g[i]);
      if (maximize) d = -d;
      if (weight_decay != 0) d = round_to<T>(std::fma(wd, pi, d));
      if (momentum != 0) {
        C bi = first ? d : round_to<T>(std::fma(keep, d, round_to<T>(static_cast<C>(b[i]) * mom)));
        b[i] = static_cast<T>(bi);
        d = nesterov ? round_to<T>(std::fma(mom, bi, d)) : bi;
      }
      p[i] = static_cast<T>(std::fma(neg_lr, d, pi));
    });
  });
}

const bool sgd_registered = detail::register_update_op("sgd_update", sgd_kernel);

}  // namespace

}  // namespace kiln::optim
