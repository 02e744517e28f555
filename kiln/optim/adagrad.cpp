#include "kiln/optim/adagrad.h"

#include "kiln/optim/update_kernels.h"

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
  const double lr = group.number("lr"), lr_decay = group.number("lr_decay");
  const double weight_decay = group.number("weight_decay"), eps = group.number("eps");
  const bool maximize = group.flag("maximize");
  if (!state.tensors.count("sum")) init_state(group, param, state);
  state.initialized = true;
  const int64_t step = ++state.step;
  const double clr = lr / (1 + static_cast<double>(step - 1) * lr_decay);

  detail::ParamBuffer out(param);
  detail::visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = out.data<T>();
    const T* g = detail::data_of<const T>(grad);
    T* sum = detail::data_of<T>(state.tensors.at("sum"));
    const C wd = static_cast<C>(weight_decay), eps_c = static_cast<C>(eps);
    const C neg_clr = static_cast<C>(-clr);
    detail::for_each_element(param.numel(), [&](int64_t i) {
      const C pi = static_cast<C>(p[i]);
      C gi = static_cast<C>(g[i]);
      if (maximize) gi = -gi;
      if (weight_decay != 0) gi = round_to<T>(std::fma(wd, pi, gi));
      const C si = round_to<T>(static_cast<C>(sum[i]) + C(1) * gi * gi);
      sum[i] = static_cast<T>(si);
      const C std_i = round_to<T>(round_to<T>(std::sqrt(si)) + eps_c);
      p[i] = static_cast<T>(pi + neg_clr * gi / std_i);
    });
  });
  out.finish("Adagrad.step", step_loc());
}

}  // namespace kiln::optim
