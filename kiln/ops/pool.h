#pragma once
// 2-D pooling (torch.nn.functional semantics), NCHW layout; inputs are [N, C, H, W] or unbatched
// [C, H, W]. Output sizes follow PyTorch: out = floor_or_ceil((in + 2 * padding - dilation *
// (kernel - 1) - 1) / stride) + 1, and with ceil_mode a last window that would start in the right
// padding is dropped. padding must be at most half the kernel.
#include <optional>
#include <utility>

#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"

namespace kiln {

struct MaxPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  // default: the kernel size
  Size2 padding = 0;                           // implicit -inf
  Size2 dilation = 1;
  bool ceil_mode = false;
};

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, const MaxPool2dOptions& options = {},
                  const Loc& loc = Loc::current());

// (values, indices): indices are int64, flat over each input plane (h * W + w), as PyTorch's
// return_indices=True. The first maximum of a window wins; NaN counts as a maximum.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Size2 kernel_size,
                                                  const MaxPool2dOptions& options = {},
                                                  const Loc& loc = Loc::current());

// The gradient of max_pool2d: zeros of [N, C, input_size] with each grad element added at its
// index (indices as max_pool2d_with_indices returns them, shaped like grad).
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, Size2 input_size,
                           const Loc& loc = Loc::current());

struct AvgPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  // default: the kernel size
  Size2 padding = 0;                           // implicit zeros
  bool ceil_mode = false;
  // Whether the zeros of `padding` count in the divisor (never the cells beyond it that
  // ceil_mode adds, as in PyTorch).
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override =
      std::nullopt;  // divide every window sum by this instead
};

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, const AvgPool2dOptions& options = {},
                  const Loc& loc = Loc::current());

// The gradient of avg_pool2d for an input of spatial size input_size.
Tensor avg_pool2d_backward(const Tensor& grad, Size2 input_size, Size2 kernel_size,
                           const AvgPool2dOptions& options = {}, const Loc& loc = Loc::current());

// Output cell i of a dim averages input [floor(i * in / out), ceil((i + 1) * in / out)).
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size, const Loc& loc = Loc::current());

// The gradient of adaptive_avg_pool2d for an input of spatial size input_size.
Tensor adaptive_avg_pool2d_backward(const Tensor& grad, Size2 input_size,
                                    const Loc& loc = Loc::current());

}  // namespace kiln
