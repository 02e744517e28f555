#include "kiln/optim/adagrad.h"

#include "kiln/optim/update_kernels.h"
#include "kiln/optim/update_op.h"

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
  detail::run_update("adagrad_update", std::move(attrs), {param, grad, state.tensors.at("sum")},
                     step_loc());
}

namespace {

// t: param, grad, sum (Note [optimizer updates are ops]).
void adagrad_kernel(const Attrs& a, const std::vector<Tensor>& t) {
  const double lr = a.f("lr"), lr_decay = a.f("lr_decay");
  const double weight_decay = a.f("weight_decay"), eps = a.f("eps");
  const bool maximize = a.b("maximize");
  const int64_t step = a.i("step");
  const double clr = lr / (1 + static_cast<double>(step - 1) * lr_decay);
  const Tensor& param = t[0];
  detail::visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = detail::data_of<T>(param);
    const T* g = detail::data_of<const T>(t[1]);
    T* sum = detail::data_of<T>(t[2]);
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
}

const bool adagrad_registered = detail::register_update_op("adagrad_update", adagrad_kernel);

}  // namespace

}  // namespace kiln::optim
