#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

// Numerically stable (max-subtracted) softmax along dim.
Tensor softmax(const Tensor& x, int64_t dim, const Loc& loc = Loc::current());
Tensor log_softmax(const Tensor& x, int64_t dim, const Loc& loc = Loc::current());

}  // namespace kiln
