#pragma once
// How a dense rank-4 [N, C, H, W] tensor orders its elements in memory. Semantics never depend on
// it (shapes, indexing and results are the same); it decides which kernels run without reorders.
#include "kiln/core/shape.h"

namespace kiln {

// Note [channels-last]: oneDNN's convolution kernels for small batches (brgemm) read and write
// NHWC, where kiln's default for [N, C, H, W] is NCHW. A channels-last tensor keeps the logical
// shape [N, C, H, W] with strides (H*W*C, 1, W*C, C), like PyTorch's
// torch.channels_last: convolutions that chose NHWC write such outputs directly, and elementwise
// ops, channel_affine and the next convolution keep the layout instead of reordering around every
// convolution. Code that needs the plain layout calls contiguous(), as for any strided view.
enum class MemoryFormat { kContiguous, kChannelsLast };

// The strides of a channels-last tensor of rank-4 `shape`.
Strides channels_last_strides(const Shape& shape);

// True when a rank-4 geometry is laid out channels-last (strides of size-1 dims are ignored) and
// is not also contiguous: a layout that is both, such as [N, C, 1, 1], counts as contiguous.
bool is_channels_last(const Shape& shape, const Strides& strides);

}  // namespace kiln
