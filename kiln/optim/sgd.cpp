#include "kiln/optim/sgd.h"

#include "kiln/optim/update_kernels.h"

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
  const double lr = group.number("lr"), momentum = group.number("momentum");
  const double dampening = group.number("dampening"), weight_decay = group.number("weight_decay");
  const bool nesterov = group.flag("nesterov"), maximize = group.flag("maximize");
  Tensor buf;
  bool first = false;
  if (momentum != 0) {
    auto it = state.tensors.find("momentum_buffer");
    first = it == state.tensors.end();
    buf = first ? detail::zeros_state(param) : it->second;
    if (first) state.tensors["momentum_buffer"] = buf;
  }
  state.initialized = true;
  ++state.step;
  detail::ParamBuffer out(param);
  detail::visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = out.data<T>();
    const T* g = detail::data_of<const T>(grad);
    T* b = buf.defined() ? detail::data_of<T>(buf) : nullptr;
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
  out.finish("SGD.step", step_loc());
}

}  // namespace kiln::optim
