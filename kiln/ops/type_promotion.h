#pragma once
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// PyTorch's result_type: operands are ranked dimensioned tensors > zero-dim tensors > wrapped C++
// scalars; a lower-ranked operand changes the result only if its category (bool < integer <
// floating) is higher, and then contributes its default dtype (int64 / float32 for scalars).
DType result_type(const std::vector<Tensor>& operands);

}  // namespace kiln
