#pragma once
// The assignment family's shared piece: fill_'s attribute, read by its definition (assign.cpp) and
// its CPU kernel (kiln/backend/cpu/assign_ops.cpp, Note [kernel table]).
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

// fill_: the value written into every element of self.
struct FillAttrs {
  double value = 0.0;
};
const FillAttrs& fill_attrs(const Op& op);

}  // namespace detail
}  // namespace kiln
