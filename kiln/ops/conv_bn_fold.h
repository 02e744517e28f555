#pragma once
// conv_bn_fold: a batch norm in evaluation mode (and the bias of the convolution before it) folded
// into one per-channel affine map, the scale and shift that conv2d_affine takes.
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {

// Note [conv-bn fold]: batch_norm(conv2d(x, w) + conv_bias) in evaluation mode equals
// conv2d(x, w) * scale + shift per output channel, with
//   scale = weight / sqrt(running_var + eps)            (weight = 1 when undefined)
//   shift = bias + (conv_bias - running_mean) * scale   (bias, conv_bias = 0 when undefined)
// as PyTorch's fuse_conv_bn_eval computes them. running_mean and running_var are [C] and
// required; weight, bias and conv_bias are [C] or undefined; all share one floating dtype (convert
// running statistics kept in another dtype first). The result is differentiable in every input
// (the running statistics are buffers and usually need none), so an evaluation-mode conv_bn with a
// gradient being recorded can fold too. It is an op of its own, not a handful of elementwise ops,
// so that a tracer or an exporter sees one fold it can constant-fold or keep.
std::pair<Tensor, Tensor> conv_bn_fold(const Tensor& running_mean, const Tensor& running_var,
                                       const Tensor& weight, const Tensor& bias,
                                       const Tensor& conv_bias, double eps,
                                       const Loc& loc = Loc::current());

}  // namespace kiln
