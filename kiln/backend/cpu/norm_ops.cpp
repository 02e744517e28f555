// CPU kernels of the norm family's ops (Note [kernel table]): batch_norm, layer_norm, group_norm,
// channel_affine and batch_norm_backward. The loops are in norm_kernels.cpp; the definitions
// (attributes, infer, vjp) in kiln/ops/norm.cpp, norm_backward.cpp and channel_affine.cpp.
#include <algorithm>

#include "kiln/backend/cpu/norm_kernels.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/norm_ops.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

std::vector<Tensor> contiguous_all(const std::vector<Tensor>& in) {
  NoGradGuard no_grad;
  std::vector<Tensor> c;
  for (const Tensor& t : in) c.push_back(contiguous(t));
  return c;
}

// Outputs: y, and the mean and biased variance of every statistic.
void norm_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const detail::NormAttrs& a = detail::norm_attrs(op);
  if (a.kind == detail::NormKind::kBatch && out[0].is_channels_last()) {
    // infer made y channels-last only for a channels-last float32 x.
    NoGradGuard no_grad;
    const Tensor& x = in[0];
    const Tensor weight = a.has_weight ? contiguous(in[1]) : Tensor();
    const Tensor bias = a.has_bias ? contiguous(in.back()) : Tensor();
    detail::batch_norm_forward_last_kernel(x.dim_size(0) * x.dim_size(2) * x.dim_size(3),
                                           x.dim_size(1), a.eps, x, weight, bias, out[0], out[1],
                                           out[2]);
    return;
  }
  const std::vector<Tensor> c = contiguous_all(in);
  const detail::NormGeom g = detail::make_norm_geom(a.kind, c[0].shape(), a.groups_or_k);
  const Tensor weight = a.has_weight ? c[1] : Tensor();
  const Tensor bias = a.has_bias ? c.back() : Tensor();
  if (a.kind == detail::NormKind::kBatch) {
    detail::batch_norm_forward_kernel({g.p, g.q, g.r}, a.eps, c[0], weight, bias, out[0], out[1],
                                      out[2]);
    return;
  }
  detail::chunk_norm_forward_kernel({g.p * g.groups, g.groups, g.q / g.groups, g.r}, a.eps, c[0],
                                    weight, bias, out[0], out[1], out[2]);
}

void channel_affine_kernel(const Op&, const std::vector<Tensor>& in,
                           const std::vector<Tensor>& out) {
  if (in[0].is_channels_last() && out[0].is_channels_last()) {
    NoGradGuard no_grad;
    const Tensor& x = in[0];
    detail::channel_affine_last_kernel(x.numel() / std::max<int64_t>(x.dim_size(1), 1),
                                       x.dim_size(1), x, contiguous(in[1]), contiguous(in[2]),
                                       out[0]);
    return;
  }
  const std::vector<Tensor> c = contiguous_all(in);
  const Tensor& x = c[0];
  const int64_t p = x.dim_size(0), q = x.dim_size(1);
  detail::channel_affine_kernel({p, q, p * q == 0 ? 0 : x.numel() / (p * q)}, x, c[1], c[2],
                                out[0]);
}

// Inputs: grad_out, x, mean, var, then weight, then grad_mean and grad_var (as the attrs say).
void batch_norm_backward_kernel(const Op& op, const std::vector<Tensor>& in,
                                const std::vector<Tensor>& out) {
  const detail::BatchNormBackwardAttrs& a = detail::batch_norm_backward_attrs(op);
  const size_t s = a.has_weight ? 5 : 4;
  if (out[0].is_channels_last()) {
    // infer made grad_input channels-last only for a channels-last float32 x; a grad_out in
    // another layout (the first gradient after a pooling, say) is laid out like x once here.
    NoGradGuard no_grad;
    std::vector<Tensor> c{contiguous(in[0], MemoryFormat::kChannelsLast), in[1]};
    for (size_t i = 2; i < in.size(); ++i) c.push_back(contiguous(in[i]));
    const Tensor& x = in[1];
    detail::batch_norm_backward_last_kernel(
        x.dim_size(0) * x.dim_size(2) * x.dim_size(3), x.dim_size(1), a.eps, c[0], x, c[2], c[3],
        a.has_weight ? c[4] : Tensor(), a.has_stat_grads ? c[s] : Tensor(),
        a.has_stat_grads ? c[s + 1] : Tensor(), out[0], out[1], out[2]);
    return;
  }
  const std::vector<Tensor> c = contiguous_all(in);
  const Tensor& x = c[1];
  const int64_t rows = x.dim_size(0) * x.dim_size(1);  // 0 for an empty batch
  const detail::BatchGeom geom{x.dim_size(0), x.dim_size(1), rows == 0 ? 0 : x.numel() / rows};
  detail::batch_norm_backward_kernel(
      geom, a.eps, c[0], x, c[2], c[3], a.has_weight ? c[4] : Tensor(),
      a.has_stat_grads ? c[s] : Tensor(), a.has_stat_grads ? c[s + 1] : Tensor(), out[0], out[1],
      out[2]);
}

KILN_REGISTER_KERNEL("batch_norm", DeviceType::CPU, norm_kernel);
KILN_REGISTER_KERNEL("layer_norm", DeviceType::CPU, norm_kernel);
KILN_REGISTER_KERNEL("group_norm", DeviceType::CPU, norm_kernel);
KILN_REGISTER_KERNEL("channel_affine", DeviceType::CPU, channel_affine_kernel);
KILN_REGISTER_KERNEL("batch_norm_backward", DeviceType::CPU, batch_norm_backward_kernel);

}  // namespace

}  // namespace kiln
