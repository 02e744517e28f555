// CPU kernels of the comparisons, the logical ops and where (Note [kernel table]): comparisons
// promote both operands to result_type and compare in that dtype, logical ops read operands as
// "nonzero", where selects per element with broadcasting. The definitions (infer, vjp) are in
// kiln/ops/compare.cpp.
#include <array>

#include "kiln/backend/cpu/as_dtype.h"
#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/type_promotion.h"

namespace kiln {

namespace {

using detail::as_dtype;

struct Eq {
  template <class T>
  static bool apply(T a, T b) {
    return a == b;
  }
};

struct Ne {
  template <class T>
  static bool apply(T a, T b) {
    return a != b;
  }
};

struct Lt {
  template <class T>
  static bool apply(T a, T b) {
    return a < b;
  }
};

struct Le {
  template <class T>
  static bool apply(T a, T b) {
    return a <= b;
  }
};

struct Gt {
  template <class T>
  static bool apply(T a, T b) {
    return a > b;
  }
};

struct Ge {
  template <class T>
  static bool apply(T a, T b) {
    return a >= b;
  }
};

struct LogicalAnd {
  static bool apply(bool a, bool b) { return a && b; }
};

struct LogicalOr {
  static bool apply(bool a, bool b) { return a || b; }
};

struct LogicalXor {
  static bool apply(bool a, bool b) { return a != b; }
};

// Comparisons in result_type of the operands (so int64 vs 2.5 compares in float32).
template <class Fn>
void compare_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  DType dt = result_type(in);
  Tensor a = as_dtype(in[0], dt);
  Tensor b = as_dtype(in[1], dt);
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    map_binary<T, T, bool>(a, b, out[0], [](C x, C y) { return Fn::template apply<C>(x, y); });
  });
}

template <class Fn>
void logical_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  map_binary<bool, bool, bool>(as_dtype(in[0], DType::Bool), as_dtype(in[1], DType::Bool), out[0],
                               [](bool a, bool b) { return Fn::apply(a, b); });
}

void logical_not_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  map_unary<bool, bool>(as_dtype(in[0], DType::Bool), out[0], [](bool v) { return !v; });
}

// cond ? a : b in the output's dtype (result_type of a and b); cond is bool (infer checked).
void where_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const Tensor& y = out[0];
  const Tensor& cond = in[0];
  Tensor a = as_dtype(in[1], y.dtype());
  Tensor b = as_dtype(in[2], y.dtype());
  const bool* pc = static_cast<const bool*>(cond.raw_data());
  visit_dtype(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    T* po = static_cast<T*>(y.raw_data());
    const Shape& shape = y.shape();
    for_each_row<4>(
        shape,
        {y.strides(), broadcast_strides(cond, shape), broadcast_strides(a, shape),
         broadcast_strides(b, shape)},
        [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& s) {
          T* o = po + off[0];
          const bool* c = pc + off[1];
          const T* x = pa + off[2];
          const T* z = pb + off[3];
          for (int64_t i = 0; i < n; ++i) o[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : z[i * s[3]];
        });
  });
}

KILN_REGISTER_KERNEL("eq", DeviceType::CPU, compare_kernel<Eq>);
KILN_REGISTER_KERNEL("ne", DeviceType::CPU, compare_kernel<Ne>);
KILN_REGISTER_KERNEL("lt", DeviceType::CPU, compare_kernel<Lt>);
KILN_REGISTER_KERNEL("le", DeviceType::CPU, compare_kernel<Le>);
KILN_REGISTER_KERNEL("gt", DeviceType::CPU, compare_kernel<Gt>);
KILN_REGISTER_KERNEL("ge", DeviceType::CPU, compare_kernel<Ge>);
KILN_REGISTER_KERNEL("logical_and", DeviceType::CPU, logical_kernel<LogicalAnd>);
KILN_REGISTER_KERNEL("logical_or", DeviceType::CPU, logical_kernel<LogicalOr>);
KILN_REGISTER_KERNEL("logical_xor", DeviceType::CPU, logical_kernel<LogicalXor>);
KILN_REGISTER_KERNEL("logical_not", DeviceType::CPU, logical_not_kernel);
KILN_REGISTER_KERNEL("where", DeviceType::CPU, where_kernel);

}  // namespace

}  // namespace kiln
