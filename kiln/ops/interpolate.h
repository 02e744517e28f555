#pragma once
#include <optional>
#include <string>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {

// Note [resize coordinate modes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Resizing maps output index o of a dim (input size in, output size out) to a source coordinate
// src. `scale` is 1 / scale_factor when a scale factor is given (PyTorch and ONNX use the given
// factor, not in / out, even when out = floor(in * factor) makes them differ), else in / out.
//
//   coordinate_mode        src                              PyTorch              ONNX Resize
//   "align_corners"        o * (in - 1) / (out - 1)         align_corners=True   align_corners
//                          (0 when out = 1, both define it)
//   "align_corners_false"  (o + 0.5) * scale - 0.5          align_corners=False  none
//                          (the centre when out = 1)
//   "pytorch_half_pixel"   (o + 0.5) * scale - 0.5          none                 pytorch_half_pixel
//                          (0 when out = 1, ONNX's rule)
//   "half_pixel"           (o + 0.5) * scale - 0.5          none                 half_pixel
//                          (the centre when out = 1)
//   "asymmetric"           o * scale                        none for bilinear    asymmetric
//
// PyTorch's align_corners=False is not ONNX's pytorch_half_pixel: at an output size of 1 PyTorch
// samples the centre ((in - 1) / 2 for a size), ONNX index 0. Like PyTorch, the PyTorch modes
// (bilinear "align_corners" / "align_corners_false", nearest "asymmetric") copy a dim whose output
// size equals its input size even when a scale factor other than 1 gave that size (e.g. 5 * 1.1
// floors to 5); the ONNX-only modes use the factor.
//
// mode "bilinear" clamps src below at 0 and interpolates linearly between floor(src) and the
// next index (clamped to in - 1). It supports all five coordinate modes; the default is
// "align_corners_false", i.e. PyTorch's default.
//
// mode "nearest" picks one index:
//   "asymmetric"  min(floor(o * scale), in - 1): PyTorch's mode='nearest' (the default), ONNX
//                 asymmetric with nearest_mode="floor". Computed in float32 like PyTorch, so
//                 boundary cases pick the same index.
//   "half_pixel"  min(floor((o + 0.5) * scale), in - 1): PyTorch's mode='nearest-exact', ONNX
//                 half_pixel with nearest_mode="round_prefer_ceil" (halves round up).
// Other coordinate modes are rejected for nearest.
struct InterpolateOptions {
  std::optional<std::pair<int64_t, int64_t>> size;        // (H_out, W_out)
  std::optional<std::pair<double, double>> scale_factor;  // (H, W); out = floor(in * factor)
  std::string mode = "nearest";                           // "nearest" | "bilinear"
  // "" means PyTorch's default for `mode`: "asymmetric" for nearest, "align_corners_false" for
  // bilinear. The op records the resolved name, never "".
  std::string coordinate_mode = "";
};

// As torch.nn.functional.interpolate for x [N, C, H, W]; exactly one of size and scale_factor
// must be given. nearest accepts any dtype, bilinear floating ones.
Tensor interpolate(const Tensor& x, const InterpolateOptions& options,
                   const Loc& loc = Loc::current());

// The gradient of interpolate: for grad [N, C, H_out, W_out] (the output shape that `options`
// gives for input_shape), the [N, C, H, W] tensor where each input element sums the weighted
// gradients of the outputs it contributed to, in a fixed order.
Tensor interpolate_backward(const Tensor& grad, const Shape& input_shape,
                            const InterpolateOptions& options, const Loc& loc = Loc::current());

}  // namespace kiln
