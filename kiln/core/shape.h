#pragma once
#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/dtype.h"

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// The element count; a shape whose count int64 cannot hold (or with a negative size) is an error
// naming op, the shape and the caller's line.
int64_t shape_numel(const Shape& shape, std::string_view op = "shape",
                    const std::source_location& loc = std::source_location::current());
Strides contiguous_strides(const Shape& shape);
// "[8, 28, 28]"
std::string shape_str(const std::vector<int64_t>& shape);
// Wraps a possibly negative dim into [0, rank); errors name the op.
int64_t wrap_dim(int64_t dim, int64_t rank, std::string_view op,
                 const std::source_location& loc = std::source_location::current());
// NumPy/PyTorch broadcasting of two shapes; throws naming op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op,
                       const std::source_location& loc = std::source_location::current());
// The same, for two tensors' shapes: the error also prints their dtypes ("float32[2, 3]").
Shape broadcast_shapes(const Shape& a, DType a_dtype, const Shape& b, DType b_dtype,
                       std::string_view op,
                       const std::source_location& loc = std::source_location::current());

}  // namespace kiln
