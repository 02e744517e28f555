// CPU kernels of the unary elementwise functions (Note [kernel table]): one scalar function per op
// in compute type, run by one map_unary loop. The definitions (dtype policy, attributes, infer,
// vjp) are in kiln/ops/unary.cpp, the attributes read here in kiln/ops/unary_ops.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
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
void unary_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const Fn fn = [&] {
    if constexpr (std::is_constructible_v<Fn, const Op&>)
      return Fn(op);
    else
      return Fn{};
  }();
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

KILN_REGISTER_KERNEL("neg", DeviceType::CPU, unary_kernel<Neg>);
KILN_REGISTER_KERNEL("abs", DeviceType::CPU, unary_kernel<Abs>);
KILN_REGISTER_KERNEL("sign", DeviceType::CPU, unary_kernel<Sign>);
KILN_REGISTER_KERNEL("relu", DeviceType::CPU, unary_kernel<Relu>);
KILN_REGISTER_KERNEL("clamp", DeviceType::CPU, unary_kernel<Clamp>);
KILN_REGISTER_KERNEL("exp", DeviceType::CPU, unary_kernel<Exp>);
KILN_REGISTER_KERNEL("log", DeviceType::CPU, unary_kernel<Log>);
KILN_REGISTER_KERNEL("log1p", DeviceType::CPU, unary_kernel<Log1p>);
KILN_REGISTER_KERNEL("sqrt", DeviceType::CPU, unary_kernel<Sqrt>);
KILN_REGISTER_KERNEL("rsqrt", DeviceType::CPU, unary_kernel<Rsqrt>);
KILN_REGISTER_KERNEL("sin", DeviceType::CPU, unary_kernel<Sin>);
KILN_REGISTER_KERNEL("cos", DeviceType::CPU, unary_kernel<Cos>);
KILN_REGISTER_KERNEL("tanh", DeviceType::CPU, unary_kernel<Tanh>);
KILN_REGISTER_KERNEL("sigmoid", DeviceType::CPU, unary_kernel<Sigmoid>);
KILN_REGISTER_KERNEL("erf", DeviceType::CPU, unary_kernel<Erf>);
KILN_REGISTER_KERNEL("gelu", DeviceType::CPU, unary_kernel<Gelu>);
KILN_REGISTER_KERNEL("silu", DeviceType::CPU, unary_kernel<Silu>);
KILN_REGISTER_KERNEL("softplus", DeviceType::CPU, unary_kernel<Softplus>);
KILN_REGISTER_KERNEL("pow_scalar", DeviceType::CPU, unary_kernel<PowScalar>);

}  // namespace

}  // namespace kiln
