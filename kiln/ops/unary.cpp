// Elementwise functions of one tensor: one UnaryOp template, one small struct per function (name,
// dtype policy, attributes, gradient written with public ops). The scalar math and the loop are
// the CPU kernel in kiln/backend/cpu/unary_ops.cpp (Note [kernel table]); the attributes it reads
// are in unary_ops.h.
#include "kiln/ops/unary.h"

#include <type_traits>

#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/elementwise_layout.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary_ops.h"

namespace kiln {

namespace {

// Note [unary dtype policy]: a "floating" function (exp, tanh, gelu, ...) of an integer or bool
// tensor computes in float32 and returns float32, like PyTorch. An "integral" function (neg, abs,
// sign, relu, clamp) keeps integer dtypes; of those only sign accepts bool (PyTorch rejects the
// rest, and neg points at logical_not). gelu, silu and softplus accept floating tensors only, as
// PyTorch's kernels do. Integer tensors never require grad, so gradients are only
// ever asked of floating inputs. infer decides the output dtype; the kernel computes in the
// input's type when the output keeps it, in float32 otherwise.

// Defaults an entry may override: what vjp needs, attributes, extra validation.
struct UnaryDefaults {
  static constexpr Op::Saves kSaves{.inputs = true, .outputs = false};
  nlohmann::json attrs() const { return nlohmann::json::object(); }
  void validate(const char*, const Tensor&, const Loc&) const {}
};

struct Floating : UnaryDefaults {
  static constexpr bool kKeepsIntegers = false;
  static constexpr bool kAcceptsBool = true;
  static constexpr bool kFloatOnly = false;
};

// Activations that PyTorch defines for floating tensors only (gelu, silu, softplus): an integer
// or bool input is an error, not a silent float32 computation.
struct FloatingOnly : Floating {
  static constexpr bool kAcceptsBool = false;
  static constexpr bool kFloatOnly = true;
};

struct Integral : UnaryDefaults {
  static constexpr bool kKeepsIntegers = true;
  static constexpr bool kAcceptsBool = false;
  static constexpr bool kFloatOnly = false;
};

using detail::kGeluTanhBeta;
using detail::kGeluTanhKappa;
using detail::kSqrt1_2;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2*pi)
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

struct NegFn : Integral {
  static constexpr const char* kName = "neg";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  static constexpr Op::Saves kSaves{.inputs = false, .outputs = false};
  Tensor grad(const Tensor&, const Tensor&, const Tensor& g) const { return neg(g); }
};

struct AbsFn : Integral {
  static constexpr const char* kName = "abs";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const { return mul(g, sign(x)); }
};

struct SignFn : Integral {
  static constexpr const char* kName = "sign";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  static constexpr bool kAcceptsBool = true;
  static constexpr Op::Saves kSaves{.inputs = false, .outputs = false};
  Tensor grad(const Tensor&, const Tensor&, const Tensor& g) const { return zeros_like(g); }
};

struct ReluFn : Integral {
  static constexpr const char* kName = "relu";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  // y > 0 exactly where x > 0 (and a NaN x gives a NaN y), so the gradient needs only y, which
  // the next op (a convolution, a linear layer) saves anyway: saving x would keep a second
  // activation alive (PyTorch saves the result too).
  static constexpr Op::Saves kSaves{.inputs = false, .outputs = true};
  Tensor grad(const Tensor&, const Tensor& y, const Tensor& g) const { return relu_backward(g, y); }
};

// Integer inputs keep their dtype; the kernel rounds fractional bounds (Note [integer clamp] in
// kiln/backend/cpu/unary_ops.cpp).
struct ClampFn : Integral {
  static constexpr const char* kName = "clamp";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  detail::ClampAttrs a;
  ClampFn(std::optional<double> lo, std::optional<double> hi) : a{lo, hi} {}
  nlohmann::json attrs() const {
    return {{"min", attr_optional(a.min)}, {"max", attr_optional(a.max)}};
  }
  static ClampFn from_attrs(const Attrs& at) { return {at.opt_f("min"), at.opt_f("max")}; }
  void validate(const char* name, const Tensor& x, const Loc& loc) const {
    if (!a.min && !a.max)
      fail(name, loc, "expected at least one of min and max, but got neither (input {})",
           x.describe());
  }
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const {
    Tensor inside;
    if (a.min) inside = ge(x, *a.min);
    if (a.max) inside = inside.defined() ? logical_and(inside, le(x, *a.max)) : le(x, *a.max);
    return where(inside, g, 0.0);
  }
};

struct ExpFn : Floating {
  static constexpr const char* kName = "exp";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kFloat32;
  static constexpr Op::Saves kSaves{.inputs = false, .outputs = true};
  Tensor grad(const Tensor&, const Tensor& y, const Tensor& g) const { return mul(g, y); }
};

struct LogFn : Floating {
  static constexpr const char* kName = "log";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kFloat32;
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const { return div(g, x); }
};

struct Log1pFn : Floating {
  static constexpr const char* kName = "log1p";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kFloat32;
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const { return div(g, add(x, 1.0)); }
};

struct SqrtFn : Floating {
  static constexpr const char* kName = "sqrt";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  static constexpr Op::Saves kSaves{.inputs = false, .outputs = true};
  Tensor grad(const Tensor&, const Tensor& y, const Tensor& g) const { return div(g, mul(y, 2.0)); }
};

struct RsqrtFn : Floating {
  static constexpr const char* kName = "rsqrt";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kFloat32;
  static constexpr Op::Saves kSaves{.inputs = false, .outputs = true};
  // d/dx x^(-1/2) = -x^(-3/2) / 2 = -y^3 / 2
  Tensor grad(const Tensor&, const Tensor& y, const Tensor& g) const {
    return mul(mul(g, mul(y, mul(y, y))), -0.5);
  }
};

struct SinFn : Floating {
  static constexpr const char* kName = "sin";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const { return mul(g, cos(x)); }
};

struct CosFn : Floating {
  static constexpr const char* kName = "cos";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const { return neg(mul(g, sin(x))); }
};

struct TanhFn : Floating {
  static constexpr const char* kName = "tanh";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  static constexpr Op::Saves kSaves{.inputs = false, .outputs = true};
  Tensor grad(const Tensor&, const Tensor& y, const Tensor& g) const {
    return mul(g, sub(1.0, mul(y, y)));
  }
};

struct SigmoidFn : Floating {
  static constexpr const char* kName = "sigmoid";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  static constexpr Op::Saves kSaves{.inputs = false, .outputs = true};
  Tensor grad(const Tensor&, const Tensor& y, const Tensor& g) const {
    return mul(g, mul(y, sub(1.0, y)));
  }
};

// Exact gelu's gradient needs the normal CDF, hence erf.
struct ErfFn : Floating {
  static constexpr const char* kName = "erf";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const {
    return mul(g, mul(exp(neg(mul(x, x))), kTwoOverSqrtPi));
  }
};

struct GeluFn : FloatingOnly {
  static constexpr const char* kName = "gelu";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  detail::GeluAttrs a;
  explicit GeluFn(std::string approximate) {
    a.use_tanh = approximate == "tanh";
    a.approximate = std::move(approximate);
  }
  nlohmann::json attrs() const { return {{"approximate", a.approximate}}; }
  static GeluFn from_attrs(const Attrs& at) { return GeluFn(at.s("approximate")); }
  void validate(const char* name, const Tensor& x, const Loc& loc) const {
    if (a.approximate != "none" && a.approximate != "tanh")
      fail(name, loc,
           "expected approximate to be one of \"none\", \"tanh\", but got \"{}\" (input {})",
           a.approximate, x.describe());
  }
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const {
    if (a.use_tanh) {
      Tensor x2 = mul(x, x);
      Tensor t = tanh(mul(add(x, mul(mul(x, x2), kGeluTanhKappa)), kGeluTanhBeta));
      // d/dx [x/2 (1 + t)] = (1 + t)/2 + x/2 (1 - t^2) beta (1 + 3 kappa x^2)
      Tensor dinner = mul(add(mul(x2, 3.0 * kGeluTanhKappa), 1.0), kGeluTanhBeta);
      Tensor d = add(mul(add(t, 1.0), 0.5), mul(mul(mul(x, 0.5), sub(1.0, mul(t, t))), dinner));
      return mul(g, d);
    }
    Tensor cdf = mul(add(erf(mul(x, kSqrt1_2)), 1.0), 0.5);
    Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), kInvSqrt2Pi);
    return mul(g, add(cdf, mul(x, pdf)));
  }
};

struct SiluFn : FloatingOnly {
  static constexpr const char* kName = "silu";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
  // d/dx x s(x) = s (1 + x (1 - s))
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const {
    Tensor s = sigmoid(x);
    return mul(g, mul(s, add(mul(x, sub(1.0, s)), 1.0)));
  }
};

struct SoftplusFn : FloatingOnly {
  static constexpr const char* kName = "softplus";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kFloat32;
  detail::SoftplusAttrs a;
  SoftplusFn(double beta, double threshold) : a{beta, threshold} {}
  nlohmann::json attrs() const {
    return {{"beta", attr_double(a.beta)}, {"threshold", attr_double(a.threshold)}};
  }
  static SoftplusFn from_attrs(const Attrs& at) { return {at.f("beta"), at.f("threshold")}; }
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const {
    Tensor z = mul(x, a.beta);
    return where(gt(z, a.threshold), g, mul(g, sigmoid(z)));
  }
};

struct PowFn : Floating {
  static constexpr const char* kName = "pow_scalar";  // "pow" is the tensor-exponent op
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kFloat32;
  detail::PowScalarAttrs a;
  explicit PowFn(double exponent) : a{exponent} {}
  nlohmann::json attrs() const { return {{"exponent", attr_double(a.exponent)}}; }
  static PowFn from_attrs(const Attrs& at) { return PowFn(at.f("exponent")); }
  Tensor grad(const Tensor& x, const Tensor&, const Tensor& g) const {
    // x^0 is constant; the general formula would give 0 * x^-1 = NaN at x = 0.
    if (a.exponent == 0.0) return zeros_like(g);
    return mul(mul(g, a.exponent), pow(x, a.exponent - 1.0));
  }
};

template <class Fn>
class UnaryOp final : public Op {
 public:
  explicit UnaryOp(Fn fn) : fn_(std::move(fn)) {}
  const Fn& fn() const { return fn_; }
  const char* name() const override { return Fn::kName; }
  bool memory_bound() const override { return true; }  // Note [rematerialization]
  nlohmann::json attrs() const override { return fn_.attrs(); }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    fn_.validate(name(), x, loc);
    DType dt = x.dtype();
    if (Fn::kFloatOnly && !is_floating(dt))
      fail(name(), loc, "expected a floating-point tensor, but got {} (as in PyTorch)",
           x.describe());
    if (dt == DType::Bool && !Fn::kAcceptsBool) {
      if constexpr (std::is_same_v<Fn, NegFn>)
        fail(name(), loc, "negation of a bool tensor is not supported, use logical_not (got {})",
             x.describe());
      fail(name(), loc, "expected a numeric tensor, but got {}", x.describe());
    }
    if (!is_floating(dt) && !Fn::kKeepsIntegers) dt = DType::Float32;
    return one_output({x.shape(), dt, x.device(), elementwise_format(in, x.shape())});
  }

  Saves saves() const override { return Fn::kSaves; }
  uint64_t may_overwrite() const override { return 1; }  // Note [in-place computation]

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0] || !is_floating(ctx.input_metas[0].dtype)) return {Tensor()};
    Tensor x = ctx.inputs.empty() ? Tensor() : ctx.inputs[0];
    Tensor y = ctx.outputs.empty() ? Tensor() : ctx.outputs[0];
    return {fn_.grad(x, y, ctx.grads[0])};
  }

 private:
  Fn fn_;
};

// Entries without attributes share one op instance; the others are built per call.
template <class Fn>
Tensor unary(const Tensor& x, const Loc& loc) {
  static const OpPtr op = std::make_shared<const UnaryOp<Fn>>(Fn{});
  return dispatch1(op, {x}, loc);
}

template <class Fn>
Tensor unary(const Tensor& x, const Loc& loc, Fn fn) {
  return call_op<UnaryOp<Fn>>({x}, loc, std::move(fn));
}

template <class F>
OpPtr make_unary(const Attrs& a) {
  if constexpr (std::is_default_constructible_v<F>) {
    (void)a;
    return std::make_shared<const UnaryOp<F>>(F{});
  } else {
    return std::make_shared<const UnaryOp<F>>(F::from_attrs(a));
  }
}
template <class... Fn>
bool register_unary_ops() {
  return (register_op({Fn::kName, {{"x"}, {"y"}, Fn::kAutocast}, make_unary<Fn>}) & ...);
}
const bool unary_ops_registered =
    register_unary_ops<NegFn, AbsFn, SignFn, ReluFn, ClampFn, ExpFn, LogFn, Log1pFn, SqrtFn,
                       RsqrtFn, SinFn, CosFn, TanhFn, SigmoidFn, ErfFn, GeluFn, SiluFn, SoftplusFn,
                       PowFn>();

template <class Fn>
const Fn& unary_fn(const Op& op, const char* what) {
  const auto* o = dynamic_cast<const UnaryOp<Fn>*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string(what) + " of op '" + op.name() + "'");
  return o->fn();
}

}  // namespace

const detail::ClampAttrs& detail::clamp_attrs(const Op& op) {
  return unary_fn<ClampFn>(op, "clamp_attrs").a;
}
const detail::PowScalarAttrs& detail::pow_scalar_attrs(const Op& op) {
  return unary_fn<PowFn>(op, "pow_scalar_attrs").a;
}
const detail::GeluAttrs& detail::gelu_attrs(const Op& op) {
  return unary_fn<GeluFn>(op, "gelu_attrs").a;
}
const detail::SoftplusAttrs& detail::softplus_attrs(const Op& op) {
  return unary_fn<SoftplusFn>(op, "softplus_attrs").a;
}

Tensor neg(const Tensor& x, const Loc& loc) {
  return unary<NegFn>(x, loc);
}
Tensor abs(const Tensor& x, const Loc& loc) {
  return unary<AbsFn>(x, loc);
}
Tensor sign(const Tensor& x, const Loc& loc) {
  return unary<SignFn>(x, loc);
}
Tensor exp(const Tensor& x, const Loc& loc) {
  return unary<ExpFn>(x, loc);
}
Tensor log(const Tensor& x, const Loc& loc) {
  return unary<LogFn>(x, loc);
}
Tensor log1p(const Tensor& x, const Loc& loc) {
  return unary<Log1pFn>(x, loc);
}
Tensor sqrt(const Tensor& x, const Loc& loc) {
  return unary<SqrtFn>(x, loc);
}
Tensor rsqrt(const Tensor& x, const Loc& loc) {
  return unary<RsqrtFn>(x, loc);
}
Tensor sin(const Tensor& x, const Loc& loc) {
  return unary<SinFn>(x, loc);
}
Tensor cos(const Tensor& x, const Loc& loc) {
  return unary<CosFn>(x, loc);
}
Tensor tanh(const Tensor& x, const Loc& loc) {
  return unary<TanhFn>(x, loc);
}
Tensor sigmoid(const Tensor& x, const Loc& loc) {
  return unary<SigmoidFn>(x, loc);
}
Tensor relu(const Tensor& x, const Loc& loc) {
  return unary<ReluFn>(x, loc);
}
Tensor gelu(const Tensor& x, const std::string& approximate, const Loc& loc) {
  return unary(x, loc, GeluFn(approximate));
}
Tensor erf(const Tensor& x, const Loc& loc) {
  return unary<ErfFn>(x, loc);
}
Tensor silu(const Tensor& x, const Loc& loc) {
  return unary<SiluFn>(x, loc);
}
Tensor softplus(const Tensor& x, double beta, double threshold, const Loc& loc) {
  return unary(x, loc, SoftplusFn(beta, threshold));
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max,
             const Loc& loc) {
  return unary(x, loc, ClampFn(min, max));
}
Tensor pow(const Tensor& x, double exponent, const Loc& loc) {
  return unary(x, loc, PowFn(exponent));
}

}  // namespace kiln
