// CPU kernels of the unary elementwise functions (Note [kernel table]): one functor per op in
// compute type, a scalar function for the integral ones (run by map_unary) and a block function
// for the floating ones (run by map_unary_blocks, vectorized with SLEEF: Note [vectorized math]).
// The definitions (dtype policy, attributes, infer, vjp) are in kiln/ops/unary.cpp, the attributes
// read here in kiln/ops/unary_ops.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/backend/cpu/vec_math.h"
#include "kiln/ops/elementwise_tile.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/unary_ops.h"

namespace kiln {

namespace {

using detail::kGeluTanhBeta;
using detail::kGeluTanhKappa;
using detail::kSqrt1_2;

// Each function's domain: kIntegers ones (neg, abs, sign, relu, clamp) compute in an integer
// input's own type, the others in float32 (Note [unary dtype policy] in kiln/ops/unary.cpp); of
// the integral ones only sign is defined on bool.
struct FloatMath {
  static constexpr bool kIntegers = false;
  static constexpr bool kBool = false;
};
struct IntegerMath {
  static constexpr bool kIntegers = true;
  static constexpr bool kBool = false;
};

struct Neg : IntegerMath {
  template <class T>
  T apply(T x) const {
    return static_cast<T>(-x);
  }
};

struct Abs : IntegerMath {
  template <class T>
  T apply(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? static_cast<T>(-x) : x;
  }
};

struct Sign : IntegerMath {
  static constexpr bool kBool = true;
  template <class T>
  T apply(T x) const {
    if constexpr (std::is_unsigned_v<T> || std::is_same_v<T, bool>)
      return static_cast<T>(x != T(0));
    else
      return static_cast<T>((T(0) < x) - (x < T(0)));  // NaN gives 0, as in PyTorch
  }
};

struct Relu : IntegerMath {
  template <class T>
  T apply(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x <= T(0) ? T(0) : x;  // NaN is not <= 0 and propagates, as in PyTorch
  }
};

struct Clamp : IntegerMath {
  detail::ClampAttrs a;
  explicit Clamp(const Op& op) : a(detail::clamp_attrs(op)) {}
  // Note [integer clamp]: kiln keeps integer dtypes where PyTorch 1.13 promotes to float32 for a
  // fractional bound; the integer result is the exact one (min rounds up, max rounds down), and
  // bounds outside the dtype's range saturate instead of overflowing.
  template <class T>
  static T bound(double v, bool is_min) {
    if constexpr (std::is_integral_v<T>) {
      v = is_min ? std::ceil(v) : std::floor(v);
      v = std::clamp(v, static_cast<double>(std::numeric_limits<T>::min()),
                     static_cast<double>(std::numeric_limits<T>::max()));
    }
    return static_cast<T>(v);
  }
  template <class T>
  T apply(T x) const {
    // std::max/min keep their first argument when comparisons fail, so NaN propagates.
    if (a.min) x = std::max(x, bound<T>(*a.min, true));
    if (a.max) x = std::min(x, bound<T>(*a.max, false));
    return x;
  }
};

// The floating functions work on blocks of at most kBlock elements in the compute type (Note
// [vectorized math]): y[i] = f(x[i]), where y may be x. Scratch lives on the stack.
constexpr int64_t kBlock = 256;

struct Exp : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    vmath::exp(x, y, n);
  }
};

struct Log : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    vmath::log(x, y, n);
  }
};

struct Log1p : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    vmath::log1p(x, y, n);
  }
};

// sqrt is correctly rounded in IEEE arithmetic, and its loop vectorizes as it is.
struct Sqrt : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
  }
};

struct Rsqrt : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = C(1) / std::sqrt(x[i]);
  }
};

struct Sin : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    vmath::sin(x, y, n);
  }
};

struct Cos : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    vmath::cos(x, y, n);
  }
};

struct Tanh : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    vmath::tanh(x, y, n);
  }
};

// t[i] = exp(-x[i]), for sigmoid and silu.
template <class C>
void exp_neg(const C* x, C* t, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) t[i] = -x[i];
  vmath::exp(t, t, n);
}

struct Sigmoid : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    alignas(32) C t[kBlock];
    exp_neg(x, t, n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = C(1) / (C(1) + t[i]);
  }
};

struct Erf : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    vmath::erf(x, y, n);
  }
};

struct Gelu : FloatMath {
  bool use_tanh;
  explicit Gelu(const Op& op) : use_tanh(detail::gelu_attrs(op).use_tanh) {}
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    alignas(32) C t[kBlock];
    if (use_tanh) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        t[i] = C(kGeluTanhBeta) * (x[i] + C(kGeluTanhKappa) * x[i] * x[i] * x[i]);
      vmath::tanh(t, t, n);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = C(0.5) * x[i] * (C(1) + t[i]);
      return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) t[i] = x[i] * C(kSqrt1_2);
    vmath::erf(t, t, n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * C(0.5) * (C(1) + t[i]);
  }
};

struct Silu : FloatMath {
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    alignas(32) C t[kBlock];
    exp_neg(x, t, n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (C(1) + t[i]);
  }
};

struct Softplus : FloatMath {
  detail::SoftplusAttrs a;
  explicit Softplus(const Op& op) : a(detail::softplus_attrs(op)) {}
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    alignas(32) C t[kBlock];
    const C beta = C(a.beta), threshold = C(a.threshold);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) t[i] = x[i] * beta;
    // Lanes above the threshold take x; their exp may overflow to inf, which is then unused.
    vmath::exp(t, t, n);
    vmath::log1p(t, t, n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * beta > threshold ? x[i] : t[i] / beta;
  }
};

struct PowScalar : FloatMath {
  double exponent;
  explicit PowScalar(const Op& op) : exponent(detail::pow_scalar_attrs(op).exponent) {}
  template <class C>
  void block(const C* x, C* y, int64_t n) const {
    if (exponent == 2.0) {  // exact, and what PyTorch does
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i];
      return;
    }
    vmath::pow(x, static_cast<C>(exponent), y, n);
  }
};

template <class Fn>
Fn make_fn(const Op& op) {
  if constexpr (std::is_constructible_v<Fn, const Op&>)
    return Fn(op);
  else
    return Fn{};
}

// fn.block over any count, kBlock elements at a time.
template <class Fn, class C>
void run_blocks(const Fn& fn, const C* x, C* y, int64_t n) {
  for (int64_t i = 0; i < n; i += kBlock)
    fn.template block<C>(x + i, y + i, std::min(kBlock, n - i));
}

// out = f(a) for a floating function computing in C: blocks run straight on the memory when input
// and output are dense and already in C; otherwise each block is gathered (converting) into a
// stack buffer and scattered back.
template <class T, class TO, class C, class Fn>
void map_unary_blocks(const Fn& fn, const Tensor& a, const Tensor& out) {
  const T* pa = static_cast<const T*>(a.raw_data());
  TO* po = static_cast<TO*>(out.raw_data());
  if (same_dense_layout(a, out)) {
    parallel_for(0, out.numel(), kGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, C> && std::is_same_v<TO, C>) {
        run_blocks(fn, pa + b, po + b, e - b);
      } else {
        alignas(32) C buf[kBlock];
        for (int64_t i = b; i < e; i += kBlock) {
          const int64_t m = std::min(kBlock, e - i);
          for (int64_t j = 0; j < m; ++j) buf[j] = static_cast<C>(pa[i + j]);
          fn.template block<C>(buf, buf, m);
          for (int64_t j = 0; j < m; ++j) po[i + j] = static_cast<TO>(buf[j]);
        }
      }
    });
    return;
  }
  for_each_row<2>(
      out.shape(), {out.strides(), broadcast_strides(a, out.shape())},
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& s) {
        TO* o = po + off[0];
        const T* x = pa + off[1];
        alignas(32) C buf[kBlock];
        for (int64_t i = 0; i < n; i += kBlock) {
          const int64_t m = std::min(kBlock, n - i);
          for (int64_t j = 0; j < m; ++j) buf[j] = static_cast<C>(x[(i + j) * s[1]]);
          fn.template block<C>(buf, buf, m);
          for (int64_t j = 0; j < m; ++j) o[(i + j) * s[0]] = static_cast<TO>(buf[j]);
        }
      });
}

// infer chose the output dtype: the input's (compute in its compute type) or float32 for an
// integer or bool input of a floating function. Only the loops a function's domain allows are
// instantiated.
template <class Fn>
void unary_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const Fn fn = make_fn<Fn>(op);
  const bool keeps_dtype = out[0].dtype() == in[0].dtype();
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    constexpr bool kFloat = std::is_floating_point_v<C>;
    if constexpr (Fn::kIntegers) {
      if constexpr (kFloat || !std::is_same_v<T, bool> || Fn::kBool) {
        if (keeps_dtype) {
          map_unary<T, T>(in[0], out[0], [&fn](C v) { return fn.template apply<C>(v); });
          return;
        }
      }
    } else if constexpr (kFloat) {
      if (keeps_dtype) {
        map_unary_blocks<T, T, C>(fn, in[0], out[0]);
        return;
      }
    } else {
      if (!keeps_dtype) {
        map_unary_blocks<T, float, float>(fn, in[0], out[0]);
        return;
      }
    }
    KILN_INTERNAL_ASSERT(false, std::string(op.name()) + " reached its kernel with " +
                                    dtype_name(in[0].dtype()) + " giving " +
                                    dtype_name(out[0].dtype()));
  });
}

// The same function over a block, for fused_elementwise (Note [elementwise tiles]): the loop of
// map_unary's dense path, or the blocks of map_unary_blocks, on the tile.
template <class Fn, class C>
TileFn<C> unary_tile_fn(const Fn& fn) {
  if constexpr (Fn::kIntegers) {
    return [fn](const C* const* args, C* out, int64_t n) {
      const C* x = args[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = fn.template apply<C>(x[i]);
    };
  } else {
    return [fn](const C* const* args, C* out, int64_t n) { run_blocks(fn, args[0], out, n); };
  }
}
template <class Fn>
ElementwiseTile unary_tile(const Op& op) {
  const Fn fn = make_fn<Fn>(op);
  return {1, unary_tile_fn<Fn, float>(fn), unary_tile_fn<Fn, double>(fn)};
}

#define KILN_UNARY(name, Fn)                                     \
  KILN_REGISTER_KERNEL(name, DeviceType::CPU, unary_kernel<Fn>); \
  KILN_REGISTER_ELEMENTWISE_TILE(name, DeviceType::CPU, unary_tile<Fn>)

KILN_UNARY("neg", Neg);
KILN_UNARY("abs", Abs);
KILN_UNARY("sign", Sign);
KILN_UNARY("relu", Relu);
KILN_UNARY("clamp", Clamp);
KILN_UNARY("exp", Exp);
KILN_UNARY("log", Log);
KILN_UNARY("log1p", Log1p);
KILN_UNARY("sqrt", Sqrt);
KILN_UNARY("rsqrt", Rsqrt);
KILN_UNARY("sin", Sin);
KILN_UNARY("cos", Cos);
KILN_UNARY("tanh", Tanh);
KILN_UNARY("sigmoid", Sigmoid);
KILN_UNARY("erf", Erf);
KILN_UNARY("gelu", Gelu);
KILN_UNARY("silu", Silu);
KILN_UNARY("softplus", Softplus);
KILN_UNARY("pow_scalar", PowScalar);

}  // namespace

}  // namespace kiln
