#pragma once
// conv -> batch norm (-> + residual) (-> relu), the unit of ResNet-style models, with a fused
// evaluation path.
#include "kiln/nn/layers.h"

namespace kiln::nn {

// Note [conv-bn inference]: in evaluation mode, with running statistics, batch_norm(conv(x)) is
// one per-channel affine map of the convolution, so this runs a single conv2d_affine (the batch
// norm folded by the conv_bn_fold op into scale = weight / sqrt(running_var + eps) and shift =
// bias - running_mean * scale, the convolution's bias into the shift; residual and relu as its
// epilogue), as PyTorch's fuse_conv_bn_eval and ONNX Runtime's graph fusions do. Whether it fuses
// depends on explicit state only, never on grad mode: both modules in evaluation mode, the batch
// norm tracking running statistics that are present, no forward hooks on either module (a hook
// must see its module's call), a rank-4 input with memory. With a gradient being recorded the
// fused call is still exact and differentiable: conv2d_affine then emits conv2d, channel_affine,
// add and relu, and conv_bn_fold has a gradient, so the conv weight, the batch norm's weight and
// bias and the conv bias get theirs. In every other case (training, hooks) it calls the modules
// as written: relu?(bn(conv(x)) + residual). Results agree within 1e-5 relative, gradients too
// (tests/nn/test_conv_bn.cpp).
Tensor conv_bn(Conv2d& conv, BatchNorm& bn, const Tensor& input, const Tensor& residual = Tensor(),
               bool relu = false);

}  // namespace kiln::nn
