#include "kiln/optim/rmsprop.h"

#include "kiln/optim/update_kernels.h"

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
  const double lr = group.number("lr"), alpha = group.number("alpha"), eps = group.number("eps");
  const double weight_decay = group.number("weight_decay"), momentum = group.number("momentum");
  const bool centered = group.flag("centered"), maximize = group.flag("maximize");
  if (!state.tensors.count("square_avg")) state.tensors["square_avg"] = detail::zeros_state(param);
  if (momentum > 0 && !state.tensors.count("momentum_buffer"))
    state.tensors["momentum_buffer"] = detail::zeros_state(param);
  if (centered && !state.tensors.count("grad_avg"))
    state.tensors["grad_avg"] = detail::zeros_state(param);
  state.initialized = true;
  ++state.step;

  detail::ParamBuffer out(param);
  detail::visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = out.data<T>();
    const T* g = detail::data_of<const T>(grad);
    T* sq = detail::data_of<T>(state.tensors.at("square_avg"));
    T* buf = momentum > 0 ? detail::data_of<T>(state.tensors.at("momentum_buffer")) : nullptr;
    T* gavg = centered ? detail::data_of<T>(state.tensors.at("grad_avg")) : nullptr;
    const C wd = static_cast<C>(weight_decay), a = static_cast<C>(alpha);
    const C one_minus_a = static_cast<C>(1 - alpha), eps_c = static_cast<C>(eps);
    const C mom = static_cast<C>(momentum), neg_lr = static_cast<C>(-lr);
    detail::for_each_element(param.numel(), [&](int64_t i) {
      const C pi = static_cast<C>(p[i]);
      C gi = static_cast<C>(g[i]);
      if (maximize) gi = -gi;
      if (weight_decay != 0) gi = round_to<T>(std::fma(wd, pi, gi));
      const C si = round_to<T>(round_to<T>(static_cast<C>(sq[i]) * a) + one_minus_a * gi * gi);
      sq[i] = static_cast<T>(si);
      C avg;
      if (centered) {
        const C ga =
            round_to<T>(std::fma(one_minus_a, gi, round_to<T>(static_cast<C>(gavg[i]) * a)));
        gavg[i] = static_cast<T>(ga);
        avg = round_to<T>(std::sqrt(round_to<T>(si + C(-1) * ga * ga)));
      } else {
        avg = round_to<T>(std::sqrt(si));
      }
      avg = round_to<T>(avg + eps_c);
      if (momentum > 0) {
        const C bi = round_to<T>(round_to<T>(static_cast<C>(buf[i]) * mom) + C(1) * gi / avg);
        buf[i] = static_cast<T>(bi);
        p[i] = static_cast<T>(std::fma(neg_lr, bi, pi));
      } else {
        p[i] = static_cast<T>(pi + neg_lr * gi / avg);
      }
    });
  });
  out.finish("RMSprop.step", step_loc());
}

}  // namespace kiln::optim
