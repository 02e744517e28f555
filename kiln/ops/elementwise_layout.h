#pragma once
// Shape and layout rules of elementwise ops, shared by their definitions' infer and the CPU loops
// (kiln/backend/cpu/loops.h).
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// Strides of `t` seen with shape `out_shape` (broadcast dims get stride 0).
Strides broadcast_strides(const Tensor& t, const Shape& out_shape);

// The layout of an elementwise op's output of shape `out_shape` (Note [channels-last]):
// channels-last when every input of that shape is channels-last (broadcast operands, such as a
// per-channel scale, do not vote), contiguous otherwise.
MemoryFormat elementwise_format(const std::vector<Tensor>& inputs, const Shape& out_shape);

}  // namespace kiln
