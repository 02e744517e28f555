// CPU kernel of running_stat_update (Note [running statistics] in kiln/ops/running_stats.cpp,
// Note [kernel table]).
#include "kiln/backend/cpu/optimizer_update_kernels.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/norm_ops.h"

namespace kiln {

namespace {

// in: running, batch_stat, x (its shape only); out[0] is running itself.
void running_stat_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>&) {
  const detail::RunningStatAttrs& a = detail::running_stat_attrs(op);
  const Tensor &running = in[0], &batch = in[1], &x = in[2];
  const int64_t channels = x.dim_size(1);
  const int64_t n = channels == 0 ? 0 : x.numel() / channels;
  if (n == 0) return;  // an empty batch leaves the statistic as it was
  const double factor = a.unbiased ? static_cast<double>(n) / static_cast<double>(n - 1) : 1.0;
  detail::visit_floating(running.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using detail::round_to;
    T* r = detail::data_of<T>(running);
    const T* b = detail::data_of<const T>(batch);
    const int64_t rs = running.stride(0), bs = batch.stride(0);
    // Each Python float becomes the buffer's dtype, and each op rounds (Note [running
    // statistics]).
    const C keep = static_cast<C>(static_cast<T>(1.0 - a.momentum));
    const C take = static_cast<C>(static_cast<T>(a.momentum));
    const C scale = static_cast<C>(static_cast<T>(factor));
    for (int64_t i = 0; i < channels; ++i) {
      C stat = static_cast<C>(b[i * bs]);
      if (a.unbiased) stat = round_to<T>(stat * scale);
      const C old_part = round_to<T>(static_cast<C>(r[i * rs]) * keep);
      r[i * rs] = static_cast<T>(old_part + round_to<T>(stat * take));
    }
  });
}

KILN_REGISTER_KERNEL("running_stat_update", DeviceType::CPU, running_stat_kernel);

}  // namespace

}  // namespace kiln
