#pragma once
// The attributes of the dropout op that its definition (dropout.cpp) and its CPU kernel
// (kiln/backend/cpu/dropout_ops.cpp, Note [kernel table]) both need.
#include "kiln/ops/op.h"

namespace kiln::detail {

// dropout: out = x * (mask ? scale : 0).
struct DropoutAttrs {
  double scale = 1.0;
};
const DropoutAttrs& dropout_attrs(const Op& op);

}  // namespace kiln::detail
