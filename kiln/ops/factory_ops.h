#pragma once
// The attributes of the non-random factory ops (full, arange, linspace, eye) that their
// definitions (factories.cpp) and their CPU kernels (kiln/backend/cpu/factory_ops.cpp, Note
// [kernel table]) both need. The factories' common base (shape, dtype, device) is factory_op.h.
#include "kiln/ops/op.h"

namespace kiln::detail {

// full (zeros, ones, the scalars of expressions): the value, and whether the result is a wrapped
// number (type_promotion.h).
struct FullAttrs {
  double value = 0.0;
  bool wrapped = false;
};
const FullAttrs& full_attrs(const Op& op);

enum class RangeKind { kArange, kLinspace, kEye };

// arange (a = start, b = step), linspace (a = start, b = end) and eye (neither): values that
// follow from two numbers and the shape.
struct RangeAttrs {
  RangeKind kind = RangeKind::kArange;
  double a = 0.0, b = 0.0;
};
const RangeAttrs& range_attrs(const Op& op);

}  // namespace kiln::detail
