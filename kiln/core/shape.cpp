#include "kiln/core/shape.h"

#include <algorithm>
#include <limits>

#include "kiln/core/error.h"

namespace kiln {

int64_t shape_numel(const Shape& shape, std::string_view op, const std::source_location& loc) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    if (s < 0) fail(op, loc, "expected non-negative sizes, but got shape {}", shape_str(shape));
    overflow = __builtin_mul_overflow(n, s, &n) || overflow;
  }
  if (overflow) {
    // A size-0 dim makes the count 0 whatever the other sizes are (as in PyTorch).
    if (std::find(shape.begin(), shape.end(), int64_t{0}) != shape.end()) return 0;
    fail(op, loc, "expected at most 2^63 - 1 elements, but shape {} has more", shape_str(shape));
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = acc;
    // Only a tensor with a size-0 dim (numel 0, checked by shape_numel) can have sizes whose
    // product overflows; its strides address nothing, so they saturate instead.
    if (__builtin_mul_overflow(acc, std::max<int64_t>(shape[i], 1), &acc))
      acc = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t wrap_dim(int64_t dim, int64_t rank, std::string_view op, const std::source_location& loc) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    fail(op, loc, "expected dim in range [{}, {}] for a tensor of rank {}, but got dim {}", -r,
         r - 1, rank, dim);
  return dim < 0 ? dim + r : dim;
}

namespace {
Shape broadcast_impl(const Shape& a, const Shape& b, std::string_view op,
                     const std::source_location& loc, const DType* a_dtype, const DType* b_dtype) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, loc,
           "expected shapes that broadcast, but got {}{} and {}{} (dimension {} is {} vs {})",
           a_dtype ? dtype_name(*a_dtype) : "", shape_str(a), b_dtype ? dtype_name(*b_dtype) : "",
           shape_str(b), static_cast<int64_t>(i) - static_cast<int64_t>(n), da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}
}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op,
                       const std::source_location& loc) {
  return broadcast_impl(a, b, op, loc, nullptr, nullptr);
}

Shape broadcast_shapes(const Shape& a, DType a_dtype, const Shape& b, DType b_dtype,
                       std::string_view op, const std::source_location& loc) {
  return broadcast_impl(a, b, op, loc, &a_dtype, &b_dtype);
}

}  // namespace kiln
