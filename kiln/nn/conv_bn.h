#pragma once
// conv -> batch norm (-> + residual) (-> relu), the unit of ResNet-style models, with a fused
// inference path.
#include "kiln/nn/layers.h"

namespace kiln::nn {

// Note [conv-bn inference]: in evaluation mode, with running statistics and no gradient being
// recorded, batch_norm(conv(x)) is one per-channel affine map of the convolution, so this runs a
// single conv2d_affine (the batch norm folded into scale = weight / sqrt(running_var + eps) and
// shift = bias - running_mean * scale, the convolution's bias into the shift; residual and relu
// as its epilogue), as PyTorch's fuse_conv_bn_eval and ONNX Runtime's graph fusions do. In every
// other case (training, a gradient being recorded, forward hooks on either module, which must see
// its call) it calls the modules as written: relu?(bn(conv(x)) + residual). Results agree within
// 1e-5 relative (tests/nn/test_conv_bn.cpp).
Tensor conv_bn(Conv2d& conv, BatchNorm& bn, const Tensor& input, const Tensor& residual = Tensor(),
               bool relu = false);

}  // namespace kiln::nn
