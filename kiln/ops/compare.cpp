// Comparisons, logic and where: one BoolBinaryOp template with one small struct per op, plus
// logical_not and where. Comparisons and logic produce bool tensors and have no gradient. Their
// CPU kernels (the scalar functions, the operand conversions, the loops) are in
// kiln/backend/cpu/compare_ops.cpp (Note [kernel table]).
#include "kiln/ops/compare.h"

#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/type_promotion.h"

namespace kiln {

namespace {

// Comparisons promote both operands with result_type and compare in that dtype (so int64 vs 2.5
// compares in float32, as in PyTorch). Logical ops read every operand as "nonzero". Each struct
// names one op of the BoolBinaryOp template.
struct EqFn {
  static constexpr const char* kName = "eq";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
};

struct NeFn {
  static constexpr const char* kName = "ne";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
};

struct LtFn {
  static constexpr const char* kName = "lt";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
};

struct LeFn {
  static constexpr const char* kName = "le";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
};

struct GtFn {
  static constexpr const char* kName = "gt";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
};

struct GeFn {
  static constexpr const char* kName = "ge";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kPromote;
};

struct LogicalAndFn {
  static constexpr const char* kName = "logical_and";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
};

struct LogicalOrFn {
  static constexpr const char* kName = "logical_or";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
};

struct LogicalXorFn {
  static constexpr const char* kName = "logical_xor";
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::kKeep;
};

template <class Fn>
class BoolBinaryOp final : public Op {
 public:
  const char* name() const override { return Fn::kName; }
  bool memory_bound() const override { return true; }  // Note [rematerialization]

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    Shape shape =
        broadcast_shapes(in[0].shape(), in[0].dtype(), in[1].shape(), in[1].dtype(), name(), loc);
    return {{shape, DType::Bool, in[0].device()}};
  }

  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
};

template <class Fn>
Tensor bool_binary(const Tensor& a, const Tensor& b, const Loc& loc) {
  static const OpPtr op = std::make_shared<const BoolBinaryOp<Fn>>();
  return dispatch1(op, {a, b}, loc);
}

class LogicalNotOp final : public Op {
 public:
  const char* name() const override { return "logical_not"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    return {{in[0].shape(), DType::Bool, in[0].device()}};
  }

  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
};

// cond ? a : b. The result dtype is result_type({a, b}); cond only selects and gets no gradient.
class WhereOp final : public Op {
 public:
  const char* name() const override { return "where"; }
  bool memory_bound() const override { return true; }  // Note [rematerialization]

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& cond = in[0];
    if (cond.dtype() != DType::Bool)
      fail(name(), loc, "expected a bool condition, but got {} (compare with ne(cond, 0.0) first)",
           cond.describe());
    Shape shape =
        broadcast_shapes(in[1].shape(), in[1].dtype(), in[2].shape(), in[2].dtype(), name(), loc);
    shape = broadcast_shapes(cond.shape(), DType::Bool, shape, result_type({in[1], in[2]}), name(),
                             loc);
    return {{shape, result_type({in[1], in[2]}), cond.device()}};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor& cond = ctx.inputs[0];
    const Tensor& g = ctx.grads[0];
    std::vector<Tensor> grads(3);
    for (size_t i = 1; i < 3; ++i) {
      const TensorMeta& m = ctx.input_metas[i];
      if (!ctx.needs_grad[i] || !is_floating(m.dtype)) continue;
      Tensor gi = i == 1 ? where(cond, g, 0.0) : where(cond, 0.0, g);
      grads[i] = to_dtype(sum_to(gi, m.shape), m.dtype);
    }
    return grads;
  }

  // Only the condition is needed; a and b contribute just their metadata.
  Saves saves() const override { return {true, false, ~uint64_t{0}, /*input_mask=*/1}; }
};

template <class... Fn>
bool register_bool_binary_ops() {
  return (
      register_op({Fn::kName, {{"a", "b"}, {"y"}, Fn::kAutocast}, no_attrs<BoolBinaryOp<Fn>>()}) &
      ...);
}
const bool compare_ops_registered =
    register_bool_binary_ops<EqFn, NeFn, LtFn, LeFn, GtFn, GeFn, LogicalAndFn, LogicalOrFn,
                             LogicalXorFn>() &
    register_op({"logical_not", {{"x"}, {"y"}, AutocastPolicy::kKeep}, no_attrs<LogicalNotOp>()}) &
    register_op(
        {"where", {{"condition", "a", "b"}, {"y"}, AutocastPolicy::kPromote}, no_attrs<WhereOp>()});

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<EqFn>(a, b, loc);
}
Tensor ne(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<NeFn>(a, b, loc);
}
Tensor lt(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<LtFn>(a, b, loc);
}
Tensor le(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<LeFn>(a, b, loc);
}
Tensor gt(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<GtFn>(a, b, loc);
}
Tensor ge(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<GeFn>(a, b, loc);
}
Tensor eq(const Tensor& a, double b, const Loc& loc) {
  return eq(a, scalar_like(b, a), loc);
}
Tensor ne(const Tensor& a, double b, const Loc& loc) {
  return ne(a, scalar_like(b, a), loc);
}
Tensor lt(const Tensor& a, double b, const Loc& loc) {
  return lt(a, scalar_like(b, a), loc);
}
Tensor le(const Tensor& a, double b, const Loc& loc) {
  return le(a, scalar_like(b, a), loc);
}
Tensor gt(const Tensor& a, double b, const Loc& loc) {
  return gt(a, scalar_like(b, a), loc);
}
Tensor ge(const Tensor& a, double b, const Loc& loc) {
  return ge(a, scalar_like(b, a), loc);
}

Tensor logical_and(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<LogicalAndFn>(a, b, loc);
}
Tensor logical_or(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<LogicalOrFn>(a, b, loc);
}
Tensor logical_xor(const Tensor& a, const Tensor& b, const Loc& loc) {
  return bool_binary<LogicalXorFn>(a, b, loc);
}
Tensor logical_not(const Tensor& a, const Loc& loc) {
  static const OpPtr op = std::make_shared<const LogicalNotOp>();
  return dispatch1(op, {a}, loc);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, const Loc& loc) {
  static const OpPtr op = std::make_shared<const WhereOp>();
  return dispatch1(op, {cond, a, b}, loc);
}
Tensor where(const Tensor& cond, const Tensor& a, double b, const Loc& loc) {
  return where(cond, a, scalar_like(b, a), loc);
}
Tensor where(const Tensor& cond, double a, const Tensor& b, const Loc& loc) {
  return where(cond, scalar_like(a, b), b, loc);
}

}  // namespace kiln
