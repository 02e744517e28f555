// CPU kernels of the broadcasting arithmetic ops (Note [kernel table]): one scalar function per op
// in compute type, a tensor-scalar fast path, and the conversion of mixed-dtype operands to the
// result dtype. The definitions (dtype rules, infer, vjp) are in kiln/ops/binary.cpp.
#include <cmath>
#include <type_traits>

#include "kiln/backend/cpu/as_dtype.h"
#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/elementwise_tile.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

struct Add {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a + b);
  }
};

struct Sub {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a - b);
  }
};

struct Mul {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a * b);
  }
};

struct Div {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a / b);
  }
};

struct Pow {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  }
};

struct Maximum {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b)) return a + b;  // NaN propagates, as in PyTorch
    return a > b ? a : b;
  }
};

struct Minimum {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b)) return a + b;
    return a < b ? a : b;
  }
};

// Computes in the output's dtype (infer's result_type, float32 for div of integers).
template <class Fn>
void binary_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  DType dt = out[0].dtype();
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    // tensor (op) scalar, the common case of `x * 0.5`: the scalar is read once, not converted
    // into a tensor of the result dtype.
    if (in[1].dim() == 0 && in[0].dtype() == dt) {
      C y = scalar_value<C>(in[1]);
      map_unary<T, T>(in[0], out[0], [y](C x) { return Fn::template apply<C>(x, y); });
      return;
    }
    if (in[0].dim() == 0 && in[1].dtype() == dt) {
      C x = scalar_value<C>(in[0]);
      map_unary<T, T>(in[1], out[0], [x](C y) { return Fn::template apply<C>(x, y); });
      return;
    }
    Tensor a = detail::as_dtype(in[0], dt);
    Tensor b = detail::as_dtype(in[1], dt);
    map_binary<T, T, T>(a, b, out[0], [](C x, C y) { return Fn::template apply<C>(x, y); });
  });
}

// The same function over a block, for fused_elementwise (Note [elementwise tiles]); a scalar
// operand arrives as a block filled with its value, as the tensor-scalar path above reads it.
template <class Fn, class C>
TileFn<C> binary_tile_fn() {
  return [](const C* const* args, C* out, int64_t n) {
    const C* x = args[0];
    const C* y = args[1];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = Fn::template apply<C>(x[i], y[i]);
  };
}
template <class Fn>
ElementwiseTile binary_tile(const Op&) {
  return {2, binary_tile_fn<Fn, float>(), binary_tile_fn<Fn, double>()};
}

#define KILN_BINARY(name, Fn)                                     \
  KILN_REGISTER_KERNEL(name, DeviceType::CPU, binary_kernel<Fn>); \
  KILN_REGISTER_ELEMENTWISE_TILE(name, DeviceType::CPU, binary_tile<Fn>)

KILN_BINARY("add", Add);
KILN_BINARY("sub", Sub);
KILN_BINARY("mul", Mul);
KILN_BINARY("div", Div);
KILN_BINARY("pow", Pow);
KILN_BINARY("maximum", Maximum);
KILN_BINARY("minimum", Minimum);

}  // namespace

}  // namespace kiln
