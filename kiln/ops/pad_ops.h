#pragma once
// The pad family's shared pieces: what its ops' definitions (pad.cpp) and their CPU kernels
// (kiln/backend/cpu/pad_ops.cpp, Note [kernel table]) both need — the mode and each op's
// attributes.
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

enum class PadMode { kConstant, kReflect, kReplicate };

// "constant", "reflect" or "replicate"; any other name is an Error naming `t`, the tensor the
// caller passed.
PadMode parse_pad_mode(const char* op, const std::string& mode, const Tensor& t, const Loc& loc);

// pad: (before, after) pairs from the last dim, the mode's name and the constant fill value.
struct PadAttrs {
  std::vector<int64_t> pads;
  std::string mode;
  double value = 0.0;
};
const PadAttrs& pad_attrs(const Op& op);

// pad_backward: the forward's input shape, its pads and mode.
struct PadBackwardAttrs {
  Shape input_shape;
  std::vector<int64_t> pads;
  std::string mode;
};
const PadBackwardAttrs& pad_backward_attrs(const Op& op);

}  // namespace detail
}  // namespace kiln
