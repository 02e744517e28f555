#pragma once
// The interpolate family's shared pieces: the validated resize that its ops' definitions
// (interpolate.cpp) and their CPU kernels (kiln/backend/cpu/interpolate_ops.cpp, Note [kernel
// table]) both read.
#include <optional>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

// The options after validation: output size known, coordinate mode named (Note [resize
// coordinate modes] in interpolate.h).
struct Resize {
  int64_t out_h = 0, out_w = 0;
  std::optional<double> factor_h, factor_w;  // the caller's scale factors, if given
  bool bilinear = false;
  std::string coordinate_mode;
};

// interpolate.
const Resize& interpolate_attrs(const Op& op);

// interpolate_backward: the forward's input shape [N, C, H, W] and its resize.
struct InterpolateBackwardAttrs {
  Shape input_shape;
  Resize resize;
};
const InterpolateBackwardAttrs& interpolate_backward_attrs(const Op& op);

}  // namespace detail
}  // namespace kiln
