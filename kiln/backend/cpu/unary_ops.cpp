// CPU kernels of the unary elementwise functions (Note [kernel table]): one scalar function per op
// in compute type, run by one map_unary loop. The definitions (dtype policy, attributes, infer,
// vjp) are in kiln/ops/unary.cpp, the attributes read here in kiln/ops/unary_ops.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
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

struct Exp : FloatMath {
  template <class T>
  T apply(T x) const {
    return std::exp(x);
  }
};

struct Log : FloatMath {
  template <class T>
  T apply(T x) const {
    return std::log(x);
  }
};

struct Log1p : FloatMath {
  template <class T>
  T apply(T x) const {
    return std::log1p(x);
  }
};

struct Sqrt : FloatMath {
  template <class T>
  T apply(T x) const {
    return std::sqrt(x);
  }
};

struct Rsqrt : FloatMath {
  template <class T>
  T apply(T x) const {
    return T(1) / std::sqrt(x);
  }
};

struct Sin : FloatMath {
  template <class T>
  T apply(T x) const {
    return std::sin(x);
  }
};

struct Cos : FloatMath {
  template <class T>
  T apply(T x) const {
    return std::cos(x);
  }
};

struct Tanh : FloatMath {
  template <class T>
  T apply(T x) const {
    return std::tanh(x);
  }
};

struct Sigmoid : FloatMath {
  template <class T>
  T apply(T x) const {
    return T(1) / (T(1) + std::exp(-x));
  }
};

struct Erf : FloatMath {
  template <class T>
  T apply(T x) const {
    return std::erf(x);
  }
};

struct Gelu : FloatMath {
  bool use_tanh;
  explicit Gelu(const Op& op) : use_tanh(detail::gelu_attrs(op).use_tanh) {}
  template <class T>
  T apply(T x) const {
    if (use_tanh) {
      T inner = T(kGeluTanhBeta) * (x + T(kGeluTanhKappa) * x * x * x);
      return T(0.5) * x * (T(1) + std::tanh(inner));
    }
    return x * T(0.5) * (T(1) + std::erf(x * T(kSqrt1_2)));
  }
};

struct Silu : FloatMath {
  template <class T>
  T apply(T x) const {
    return x / (T(1) + std::exp(-x));
  }
};

struct Softplus : FloatMath {
  detail::SoftplusAttrs a;
  explicit Softplus(const Op& op) : a(detail::softplus_attrs(op)) {}
  template <class T>
  T apply(T x) const {
    T z = x * T(a.beta);
    return z > T(a.threshold) ? x : static_cast<T>(std::log1p(std::exp(z)) / T(a.beta));
  }
};

struct PowScalar : FloatMath {
  double exponent;
  explicit PowScalar(const Op& op) : exponent(detail::pow_scalar_attrs(op).exponent) {}
  template <class T>
  T apply(T x) const {
    if (exponent == 2.0) return x * x;  // exact, and what PyTorch does
    return static_cast<T>(std::pow(x, static_cast<T>(exponent)));
  }
};

// infer chose the output dtype: the input's (compute in its compute type) or float32 for an
// integer or bool input of a floating function. Only the loops a function's domain allows are
// instantiated.
template <class Fn>
Fn make_fn(const Op& op) {
  if constexpr (std::is_constructible_v<Fn, const Op&>)
    return Fn(op);
  else
    return Fn{};
}

template <class Fn>
void unary_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const Fn fn = make_fn<Fn>(op);
  const bool keeps_dtype = out[0].dtype() == in[0].dtype();
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    constexpr bool kFloat = std::is_floating_point_v<C>;
    if constexpr (kFloat || (Fn::kIntegers && (!std::is_same_v<T, bool> || Fn::kBool))) {
      if (keeps_dtype) {
        map_unary<T, T>(in[0], out[0], [&fn](C v) { return fn.template apply<C>(v); });
        return;
      }
    } else if constexpr (!Fn::kIntegers) {
      if (!keeps_dtype) {
        map_unary<T, float>(in[0], out[0], [&fn](auto v) {
          return fn.template apply<float>(static_cast<float>(v));
        });
        return;
      }
    }
    KILN_INTERNAL_ASSERT(false, std::string(op.name()) + " reached its kernel with " +
                                    dtype_name(in[0].dtype()) + " giving " +
                                    dtype_name(out[0].dtype()));
  });
}

// The same function over a block, for fused_elementwise (Note [elementwise tiles]): the loop of
// map_unary's dense path, on the block.
template <class Fn, class C>
TileFn<C> unary_tile_fn(const Fn& fn) {
  return [fn](const C* const* args, C* out, int64_t n) {
    const C* x = args[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = fn.template apply<C>(x[i]);
  };
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
