// Broadcasting arithmetic: one BinaryOp template, one small struct per op (name, dtype rules,
// gradient). This file is the model for the other op families. The scalar functions and the loops
// are the CPU kernel in kiln/backend/cpu/binary_ops.cpp (Note [kernel table]).
#include "kiln/ops/binary.h"

#include <cmath>

#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/elementwise_layout.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/type_promotion.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

using Grads = std::vector<Tensor>;

// Each op: name, what its gradient needs, the gradient.
struct AddFn {
  static constexpr const char* kName = "add";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
  static constexpr bool kNeedsInputs = false;
  static Grads grad(const Tensor&, const Tensor&, const Tensor& g) { return {g, g}; }
};

struct SubFn {
  static constexpr const char* kName = "sub";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
  static constexpr bool kNeedsInputs = false;
  static Grads grad(const Tensor&, const Tensor&, const Tensor& g) { return {g, neg(g)}; }
};

struct MulFn {
  static constexpr const char* kName = "mul";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
  static constexpr bool kNeedsInputs = true;
  // Each operand's gradient reads only the other one (Op::saves_for saves only that).
  static Grads grad(const Tensor& a, const Tensor& b, const Tensor& g) {
    return {b.defined() ? mul(g, b) : Tensor(), a.defined() ? mul(g, a) : Tensor()};
  }
};

struct DivFn {
  static constexpr const char* kName = "div";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
  static constexpr bool kNeedsInputs = true;
  static Grads grad(const Tensor& a, const Tensor& b, const Tensor& g) {
    Tensor ga = div(g, b);
    return {ga, neg(div(mul(ga, a), b))};
  }
};

struct PowFn {
  static constexpr const char* kName = "pow";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kFloat32;
  static constexpr bool kNeedsInputs = true;
  static Grads grad(const Tensor& a, const Tensor& b, const Tensor& g) {
    Tensor ga = mul(mul(g, b), pow(a, sub(b, 1.0)));
    // d/db a^b = a^b log a; PyTorch defines it as 0 where a == 0 and b >= 0 (the limit).
    Tensor gb = mul(mul(g, pow(a, b)), log(a));
    gb = where(logical_and(eq(a, 0.0), ge(b, 0.0)), 0.0, gb);
    return {ga, gb};
  }
};

// Gradients of maximum / minimum, as PyTorch's: an operand gets g unless it lost (the other is
// strictly larger for maximum, smaller for minimum), and half of g at ties. With a NaN operand
// neither lost, so both get g (the NaN propagated from either).
Grads extremum_grads(const Tensor& a_lost, const Tensor& b_lost, const Tensor& ties,
                     const Tensor& g) {
  Tensor shared = where(ties, mul(g, 0.5), g);
  return {where(a_lost, 0.0, shared), where(b_lost, 0.0, shared)};
}

struct MaximumFn {
  static constexpr const char* kName = "maximum";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
  static constexpr bool kNeedsInputs = true;
  static Grads grad(const Tensor& a, const Tensor& b, const Tensor& g) {
    return extremum_grads(lt(a, b), gt(a, b), eq(a, b), g);
  }
};

struct MinimumFn {
  static constexpr const char* kName = "minimum";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
  static constexpr bool kNeedsInputs = true;
  static Grads grad(const Tensor& a, const Tensor& b, const Tensor& g) {
    return extremum_grads(gt(a, b), lt(a, b), eq(a, b), g);
  }
};

template <class Fn>
class BinaryOp final : public Op {
 public:
  const char* name() const override { return Fn::kName; }
  bool memory_bound() const override { return true; }  // Note [rematerialization]

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    Shape shape =
        broadcast_shapes(in[0].shape(), in[0].dtype(), in[1].shape(), in[1].dtype(), name(), loc);
    DType dt = result_type(in);
    if (std::is_same_v<Fn, DivFn> && !is_floating(dt)) dt = DType::Float32;  // true division
    if (dt == DType::Bool && (std::is_same_v<Fn, SubFn> || std::is_same_v<Fn, PowFn>))
      fail(name(), loc, "expected numeric tensors, but got {} and {} (use logical_xor for bool)",
           in[0].describe(), in[1].describe());
    // As PyTorch: subtracting a bool tensor from anything (or anything from one) is refused.
    if (std::is_same_v<Fn, SubFn> && (in[0].dtype() == DType::Bool || in[1].dtype() == DType::Bool))
      fail(name(), loc,
           "expected numeric tensors, but got {} and {} (subtraction with a bool tensor is not "
           "supported; to invert a mask use logical_not)",
           in[0].describe(), in[1].describe());
    const MemoryFormat format = elementwise_format(in, shape);
    return one_output({std::move(shape), dt, in[0].device(), format});
  }

  Saves saves() const override { return {Fn::kNeedsInputs, false}; }
  uint64_t may_overwrite() const override { return 3; }  // Note [in-place computation]
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    Saves s = saves();
    if constexpr (std::is_same_v<Fn, MulFn>)
      s.input_mask = (needs_grad[1] ? 1u : 0u) | (needs_grad[0] ? 2u : 0u);
    return s;
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    Grads g = Fn::grad(ctx.inputs[0], ctx.inputs[1], ctx.grads[0]);
    for (size_t i = 0; i < 2; ++i) {
      if (!ctx.needs_grad[i]) {
        g[i] = Tensor();
        continue;
      }
      g[i] = to_dtype(sum_to(g[i], ctx.input_metas[i].shape), ctx.input_metas[i].dtype);
    }
    return g;
  }
};

template <class Fn>
Tensor binary(const Tensor& a, const Tensor& b, const Loc& loc) {
  static const OpPtr op = std::make_shared<const BinaryOp<Fn>>();
  return dispatch1(op, {a, b}, loc);
}

template <class... Fn>
bool register_binary_ops() {
  return (register_op({Fn::kName, {{"a", "b"}, {"y"}, Fn::kAutocast}, no_attrs<BinaryOp<Fn>>()}) &
          ...);
}
const bool binary_ops_registered =
    register_binary_ops<AddFn, SubFn, MulFn, DivFn, PowFn, MaximumFn, MinimumFn>();

}  // namespace

Tensor scalar_like(double value, const Tensor& like) {
  // Integral values become int64 scalars so that int tensors stay integer (x + 1); others float64.
  bool integral = std::isfinite(value) && value == std::trunc(value) && std::abs(value) < 0x1p53;
  DType dt = integral && !is_floating(like.dtype()) ? DType::Int64 : DType::Float64;
  return detail::wrapped_number(value, dt, like.device());
}

namespace {
// A size as a scalar operand: the wrapped number of its value, whose `value` attr is declared
// symbolic when the size is (Note [size lists]).
Tensor size_scalar(const SymInt& n, const Tensor& like) {
  SymAttrs attrs;
  if (n.is_symbolic()) attrs.push_back({"/value", n});
  const SymAttrScope sym("full", std::move(attrs));
  return scalar_like(static_cast<double>(n.hint()), like);
}
}  // namespace

#define KILN_SIZE_OPERAND(name, op)                               \
  Tensor name(const Tensor& a, const SymInt& b, const Loc& loc) { \
    return name(a, size_scalar(b, a), loc);                       \
  }                                                               \
  Tensor name(const SymInt& a, const Tensor& b, const Loc& loc) { \
    return name(size_scalar(a, b), b, loc);                       \
  }                                                               \
  Tensor operator op(const Tensor& a, const SymInt& b) {          \
    return name(a, b);                                            \
  }                                                               \
  Tensor operator op(const SymInt& a, const Tensor& b) {          \
    return name(a, b);                                            \
  }
KILN_SIZE_OPERAND(add, +)
KILN_SIZE_OPERAND(sub, -)
KILN_SIZE_OPERAND(mul, *)
KILN_SIZE_OPERAND(div, /)
#undef KILN_SIZE_OPERAND

Tensor add(const Tensor& a, const Tensor& b, const Loc& loc) {
  return binary<AddFn>(a, b, loc);
}
Tensor sub(const Tensor& a, const Tensor& b, const Loc& loc) {
  return binary<SubFn>(a, b, loc);
}
Tensor mul(const Tensor& a, const Tensor& b, const Loc& loc) {
  return binary<MulFn>(a, b, loc);
}
Tensor div(const Tensor& a, const Tensor& b, const Loc& loc) {
  return binary<DivFn>(a, b, loc);
}
Tensor pow(const Tensor& a, const Tensor& b, const Loc& loc) {
  return binary<PowFn>(a, b, loc);
}
Tensor maximum(const Tensor& a, const Tensor& b, const Loc& loc) {
  return binary<MaximumFn>(a, b, loc);
}
Tensor minimum(const Tensor& a, const Tensor& b, const Loc& loc) {
  return binary<MinimumFn>(a, b, loc);
}

Tensor add(const Tensor& a, double b, const Loc& loc) {
  return add(a, scalar_like(b, a), loc);
}
Tensor sub(const Tensor& a, double b, const Loc& loc) {
  return sub(a, scalar_like(b, a), loc);
}
Tensor mul(const Tensor& a, double b, const Loc& loc) {
  return mul(a, scalar_like(b, a), loc);
}
Tensor div(const Tensor& a, double b, const Loc& loc) {
  return div(a, scalar_like(b, a), loc);
}
Tensor add(double a, const Tensor& b, const Loc& loc) {
  return add(scalar_like(a, b), b, loc);
}
Tensor sub(double a, const Tensor& b, const Loc& loc) {
  return sub(scalar_like(a, b), b, loc);
}
Tensor mul(double a, const Tensor& b, const Loc& loc) {
  return mul(scalar_like(a, b), b, loc);
}
Tensor div(double a, const Tensor& b, const Loc& loc) {
  return div(scalar_like(a, b), b, loc);
}
Tensor pow(double a, const Tensor& b, const Loc& loc) {
  return pow(scalar_like(a, b), b, loc);
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator+(const Tensor& a, double b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, double b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, double b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, double b) {
  return div(a, b);
}
Tensor operator+(double a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(double a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(double a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(double a, const Tensor& b) {
  return div(a, b);
}
Tensor operator-(const Tensor& a) {
  return neg(a);
}

}  // namespace kiln
