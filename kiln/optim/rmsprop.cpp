#include "kiln/optim/rmsprop.h"

#include "kiln/optim/update_kernels.h"
#include "kiln/optim/update_op.h"

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
  detail::run_update("rmsprop_update", std::move(attrs), tensors, step_loc());
}

namespace {

// t: param, grad, square_avg[, momentum_buffer][, grad_avg] (Note [optimizer updates are ops]).
void rmsprop_kernel(const Attrs& at, const std::vector<Tensor>& t) {
  const double lr = at.f("lr"), alpha = at.f("alpha"), eps = at.f("eps");
  const double weight_decay = at.f("weight_decay"), momentum = at.f("momentum");
  const bool centered = at.b("centered"), maximize = at.b("maximize");
  const Tensor& param = t[0];
  detail::visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = detail::data_of<T>(param);
    const T* g = detail::data_of<const T>(t[1]);
    T* sq = detail::data_of<T>(t[2]);
    T* buf = momentum > 0 ? detail::data_of<T>(t[3]) : nullptr;
    T* gavg = centered ? detail::data_of<T>(t[momentum > 0 ? 4 : 3]) : nullptr;
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
}

const bool rmsprop_registered = detail::register_update_op("rmsprop_update", rmsprop_kernel);

}  // namespace

}  // namespace kiln::optim
