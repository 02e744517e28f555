#include "kiln/optim/adam.h"

#include "kiln/optim/update_kernels.h"
#include "kiln/optim/update_op.h"

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
  detail::run_update("adam_update", std::move(attrs), tensors, step_loc());
}

namespace {

// t: param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq] (Note [optimizer updates are ops]).
void adam_kernel(const Attrs& a, const std::vector<Tensor>& t) {
  const double lr = a.f("lr"), eps = a.f("eps"), weight_decay = a.f("weight_decay");
  const double beta1 = a.f("beta1"), beta2 = a.f("beta2");
  const bool amsgrad = a.b("amsgrad"), maximize = a.b("maximize"), decoupled = a.b("decoupled");
  const int64_t step = a.i("step");
  // Scalar arithmetic in double, as Python does it.
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  const Tensor& param = t[0];
  detail::visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = detail::data_of<T>(param);
    const T* g = detail::data_of<const T>(t[1]);
    T* m = detail::data_of<T>(t[2]);
    T* v = detail::data_of<T>(t[3]);
    T* vmax = amsgrad ? detail::data_of<T>(t[4]) : nullptr;
    const C wd = static_cast<C>(weight_decay), decay = static_cast<C>(1 - lr * weight_decay);
    const C b1 = static_cast<C>(beta1), one_minus_b1 = static_cast<C>(1 - beta1);
    const C b2 = static_cast<C>(beta2), one_minus_b2 = static_cast<C>(1 - beta2);
    const C bc2_sqrt = static_cast<C>(bias_correction2_sqrt), eps_c = static_cast<C>(eps);
    const C neg_step_size = static_cast<C>(-step_size);
    detail::for_each_element(param.numel(), [&](int64_t i) {
      C pi = static_cast<C>(p[i]);
      C gi = static_cast<C>(g[i]);
      if (maximize) gi = -gi;
      if (decoupled)
        pi = round_to<T>(pi * decay);
      else if (weight_decay != 0)
        gi = round_to<T>(std::fma(wd, pi, gi));
      const C mi = round_to<T>(std::fma(one_minus_b1, gi, round_to<T>(static_cast<C>(m[i]) * b1)));
      const C vi = round_to<T>(round_to<T>(static_cast<C>(v[i]) * b2) + one_minus_b2 * gi * gi);
      m[i] = static_cast<T>(mi);
      v[i] = static_cast<T>(vi);
      C second = vi;
      if (amsgrad) {
        second = round_to<T>(detail::nan_max(static_cast<C>(vmax[i]), vi));
        vmax[i] = static_cast<T>(second);
      }
      C denom = round_to<T>(std::sqrt(second));
      denom = round_to<T>(denom / bc2_sqrt);
      denom = round_to<T>(denom + eps_c);
      p[i] = static_cast<T>(pi + neg_step_size * mi / denom);
    });
  });
}

const bool adam_registered = detail::register_update_op("adam_update", adam_kernel);

}  // namespace

}  // namespace kiln::optim
