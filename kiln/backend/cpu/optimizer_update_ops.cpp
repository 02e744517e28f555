// CPU kernels of the optimizers' update ops sgd_update, adam_update, rmsprop_update and
// adagrad_update (Note [kernel table]): each optimizer's fused loop over the elements (Note
// [optimizer parity] in optimizer_update_kernels.h). The ops' definition (inference, declared
// writes, Note [optimizer updates are ops]) is in kiln/ops/optimizer_update.cpp; the optimizers
// that dispatch them (state, hyper-parameters, step()) are in kiln/optim/.
#include <cmath>
#include <vector>

#include "kiln/backend/cpu/loops.h"
#include "kiln/backend/cpu/optimizer_update_kernels.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/optimizer_update.h"

namespace kiln {

namespace {

using detail::data_of;
using detail::for_each_chunk;
using detail::for_each_element;
using detail::nan_max;
using detail::visit_floating;
using detail::with_flag;

// The loop of one update: t[0] is the parameter's contiguous memory, t[1] the contiguous gradient
// of its dtype, t[2...] the contiguous state tensors, in the order the optimizer passes them.
using UpdateLoop = void (*)(const Attrs& attrs, const std::vector<Tensor>& t);

// t: param, grad[, momentum_buffer] (Note [optimizer updates are ops]). On the first step the
// buffer starts as the gradient, as in PyTorch.
void sgd_loop(const Attrs& a, const std::vector<Tensor>& t) {
  const double lr = a.f("lr"), momentum = a.f("momentum"), dampening = a.f("dampening");
  const double weight_decay = a.f("weight_decay");
  const bool nesterov = a.b("nesterov"), maximize = a.b("maximize"), first = a.b("first_step");
  const Tensor& param = t[0];
  visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = data_of<T>(param);
    const T* g = data_of<const T>(t[1]);
    T* b = momentum != 0 ? data_of<T>(t[2]) : nullptr;
    const C wd = static_cast<C>(weight_decay), mom = static_cast<C>(momentum);
    const C keep = static_cast<C>(1 - dampening), neg_lr = static_cast<C>(-lr);
    // The momentum buffer's loads and stores are a compile-time choice (with_flag), so the loop
    // has no memory access under a branch and vectorizes (Note [vectorized updates]).
    with_flag(momentum != 0, [&](auto has_momentum) {
      for_each_chunk(param.numel(), [&](int64_t b0, int64_t e0) {
#pragma omp simd
        for (int64_t i = b0; i < e0; ++i) {
          const C pi = static_cast<C>(p[i]);
          C d = static_cast<C>(g[i]);
          if (maximize) d = -d;
          if (weight_decay != 0) d = round_to<T>(std::fma(wd, pi, d));
          if constexpr (decltype(has_momentum)::value) {
            C bi =
                first ? d : round_to<T>(std::fma(keep, d, round_to<T>(static_cast<C>(b[i]) * mom)));
            b[i] = static_cast<T>(bi);
            d = nesterov ? round_to<T>(std::fma(mom, bi, d)) : bi;
          }
          p[i] = static_cast<T>(std::fma(neg_lr, d, pi));
        }
      });
    });
  });
}

// t: param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq] (Note [optimizer updates are ops]).
void adam_loop(const Attrs& a, const std::vector<Tensor>& t) {
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
  visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = data_of<T>(param);
    const T* g = data_of<const T>(t[1]);
    T* m = data_of<T>(t[2]);
    T* v = data_of<T>(t[3]);
    T* vmax = amsgrad ? data_of<T>(t[4]) : nullptr;
    const C wd = static_cast<C>(weight_decay), decay = static_cast<C>(1 - lr * weight_decay);
    const C b1 = static_cast<C>(beta1), one_minus_b1 = static_cast<C>(1 - beta1);
    const C b2 = static_cast<C>(beta2), one_minus_b2 = static_cast<C>(1 - beta2);
    const C bc2_sqrt = static_cast<C>(bias_correction2_sqrt), eps_c = static_cast<C>(eps);
    const C neg_step_size = static_cast<C>(-step_size);
    // Flags that only select arithmetic are applied as arithmetic (a multiplication by 1 or -1 is
    // exact); those that add operations are compile-time (Note [vectorized updates]).
    const C grad_sign = maximize ? C(-1) : C(1), param_decay = decoupled ? decay : C(1);
    with_flag(amsgrad, [&](auto has_max) {
      with_flag(!decoupled && weight_decay != 0, [&](auto coupled_decay) {
        for_each_chunk(param.numel(), [&](int64_t b0, int64_t e0) {
#pragma omp simd
          for (int64_t i = b0; i < e0; ++i) {
            const C pi = round_to<T>(static_cast<C>(p[i]) * param_decay);
            C gi = static_cast<C>(g[i]) * grad_sign;
            if constexpr (decltype(coupled_decay)::value) gi = round_to<T>(std::fma(wd, pi, gi));
            const C mi =
                round_to<T>(std::fma(one_minus_b1, gi, round_to<T>(static_cast<C>(m[i]) * b1)));
            const C vi =
                round_to<T>(round_to<T>(static_cast<C>(v[i]) * b2) + one_minus_b2 * gi * gi);
            m[i] = static_cast<T>(mi);
            v[i] = static_cast<T>(vi);
            C second = vi;
            if constexpr (decltype(has_max)::value) {
              second = round_to<T>(nan_max(static_cast<C>(vmax[i]), vi));
              vmax[i] = static_cast<T>(second);
            }
            C denom = round_to<T>(std::sqrt(second));
            denom = round_to<T>(denom / bc2_sqrt);
            denom = round_to<T>(denom + eps_c);
            p[i] = static_cast<T>(pi + neg_step_size * mi / denom);
          }
        });
      });
    });
  });
}

// t: param, grad, square_avg[, momentum_buffer][, grad_avg] (Note [optimizer updates are ops]).
void rmsprop_loop(const Attrs& at, const std::vector<Tensor>& t) {
  const double lr = at.f("lr"), alpha = at.f("alpha"), eps = at.f("eps");
  const double weight_decay = at.f("weight_decay"), momentum = at.f("momentum");
  const bool centered = at.b("centered"), maximize = at.b("maximize");
  const Tensor& param = t[0];
  visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = data_of<T>(param);
    const T* g = data_of<const T>(t[1]);
    T* sq = data_of<T>(t[2]);
    T* buf = momentum > 0 ? data_of<T>(t[3]) : nullptr;
    T* gavg = centered ? data_of<T>(t[momentum > 0 ? 4 : 3]) : nullptr;
    const C wd = static_cast<C>(weight_decay), a = static_cast<C>(alpha);
    const C one_minus_a = static_cast<C>(1 - alpha), eps_c = static_cast<C>(eps);
    const C mom = static_cast<C>(momentum), neg_lr = static_cast<C>(-lr);
    for_each_element(param.numel(), [&](int64_t i) {
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

// t: param, grad, sum (Note [optimizer updates are ops]).
void adagrad_loop(const Attrs& a, const std::vector<Tensor>& t) {
  const double lr = a.f("lr"), lr_decay = a.f("lr_decay");
  const double weight_decay = a.f("weight_decay"), eps = a.f("eps");
  const bool maximize = a.b("maximize");
  const int64_t step = a.i("step");
  const double clr = lr / (1 + static_cast<double>(step - 1) * lr_decay);
  const Tensor& param = t[0];
  visit_floating(param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* p = data_of<T>(param);
    const T* g = data_of<const T>(t[1]);
    T* sum = data_of<T>(t[2]);
    const C wd = static_cast<C>(weight_decay), eps_c = static_cast<C>(eps);
    const C neg_clr = static_cast<C>(-clr);
    for_each_element(param.numel(), [&](int64_t i) {
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

// The kernel of an update op: runs kLoop on the parameter's memory. The loop runs over contiguous
// memory; a strided parameter is copied and written back here, inside the op, so the write is
// this op's alone.
// An update whose numbers come from a hyper row (Note [updates in graphs]) runs on the attrs
// with those numbers.
template <UpdateLoop kLoop>
void update_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>&) {
  const Tensor& param = in[0];
  std::vector<Tensor> t;
  nlohmann::json storage;
  const nlohmann::json& attrs = detail::resolved_update_attrs(op, in, t, storage);
  if (!param.is_contiguous()) {
    t[0] = empty(param.shape(), {param.dtype(), param.device()});
    copy_into(t[0], param);
  }
  kLoop(Attrs(op.name(), attrs), t);
  if (!t[0].is_same(param)) copy_into(param, t[0]);
}

KILN_REGISTER_KERNEL("sgd_update", DeviceType::CPU, update_kernel<sgd_loop>);
KILN_REGISTER_KERNEL("adam_update", DeviceType::CPU, update_kernel<adam_loop>);
KILN_REGISTER_KERNEL("rmsprop_update", DeviceType::CPU, update_kernel<rmsprop_loop>);
KILN_REGISTER_KERNEL("adagrad_update", DeviceType::CPU, update_kernel<adagrad_loop>);

}  // namespace

}  // namespace kiln
