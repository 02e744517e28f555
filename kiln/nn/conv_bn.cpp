#include "kiln/nn/conv_bn.h"

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

Tensor conv_bn(Conv2d& conv, BatchNorm& bn, const Tensor& input, const Tensor& residual,
               bool relu_after) {
  const bool fuse = !conv.is_training() && !bn.is_training() && !GradMode::is_enabled() &&
                    bn.options.track_running_stats && bn.running_mean.defined() &&
                    bn.running_var.defined() && !conv.has_forward_hooks() &&
                    !bn.has_forward_hooks() && input.dim() == 4 && !input.is_meta();
  if (!fuse) {
    Tensor y = bn(conv(input));
    if (residual.defined()) y = add(y, residual);
    return relu_after ? relu(y) : y;
  }
  // batch_norm's evaluation formula (ops/norm.cpp), folded once per call on [C] vectors.
  const DType dt = input.dtype();
  Tensor scale = rsqrt(add(to_dtype(bn.running_var, dt), bn.options.eps));
  if (bn.weight.defined()) scale = mul(bn.weight, scale);
  Tensor shift = neg(mul(to_dtype(bn.running_mean, dt), scale));
  if (bn.bias.defined()) shift = add(bn.bias, shift);
  if (conv.bias.defined()) shift = add(mul(conv.bias, scale), shift);
  return conv2d_affine(input, conv.weight, scale, shift, residual, relu_after, conv.options);
}

}  // namespace kiln::nn
