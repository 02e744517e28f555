#pragma once
#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// "[8, 28, 28]"
std::string shape_str(const std::vector<int64_t>& shape);
// Wraps a possibly negative dim into [0, rank); errors name the op.
int64_t wrap_dim(int64_t dim, int64_t rank, std::string_view op,
                 const std::source_location& loc = std::source_location::current());
// NumPy/PyTorch broadcasting of two shapes; throws naming op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op,
                       const std::source_location& loc = std::source_location::current());

}  // namespace kiln
