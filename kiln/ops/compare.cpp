// Comparisons, logic and where: one BoolBinaryOp template with one small struct per op, plus
// logical_not and where. Comparisons and logic produce bool tensors and have no gradient.
#include "kiln/ops/compare.h"

#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/type_promotion.h"

namespace kiln {

namespace {

// Comparisons promote both operands with result_type and compare in that dtype (so int64 vs 2.5
// compares in float32, as in PyTorch). Logical ops read every operand as "nonzero".
struct EqFn {
  static constexpr const char* kName = "eq";
  static constexpr bool kLogical = false;
  template <class T>
  static bool apply(T a, T b) {
    return a == b;
  }
};

struct NeFn {
  static constexpr const char* kName = "ne";
  static constexpr bool kLogical = false;
  template <class T>
  static bool apply(T a, T b) {
    return a != b;
  }
};

struct LtFn {
  static constexpr const char* kName = "lt";
  static constexpr bool kLogical = false;
  template <class T>
  static bool apply(T a, T b) {
    return a < b;
  }
};

struct LeFn {
  static constexpr const char* kName = "le";
  static constexpr bool kLogical = false;
  template <class T>
  static bool apply(T a, T b) {
    return a <= b;
  }
};

struct GtFn {
  static constexpr const char* kName = "gt";
  static constexpr bool kLogical = false;
  template <class T>
  static bool apply(T a, T b) {
    return a > b;
  }
};

struct GeFn {
  static constexpr const char* kName = "ge";
  static constexpr bool kLogical = false;
  template <class T>
  static bool apply(T a, T b) {
    return a >= b;
  }
};

struct LogicalAndFn {
  static constexpr const char* kName = "logical_and";
  static constexpr bool kLogical = true;
  static bool apply(bool a, bool b) { return a && b; }
};

struct LogicalOrFn {
  static constexpr const char* kName = "logical_or";
  static constexpr bool kLogical = true;
  static bool apply(bool a, bool b) { return a || b; }
};

struct LogicalXorFn {
  static constexpr const char* kName = "logical_xor";
  static constexpr bool kLogical = true;
  static bool apply(bool a, bool b) { return a != b; }
};

// Converts `t` to `dt` for a kernel without recording anything. Conversion to bool is "nonzero"
// (NaN counts as true, as in PyTorch).
Tensor as_dtype(const Tensor& t, DType dt) {
  if (t.dtype() == dt) return t;
  Tensor out = empty(t.shape(), {dt, t.device()});
  copy_into(out, t);
  return out;
}

template <class Fn>
class BoolBinaryOp final : public Op {
 public:
  const char* name() const override { return Fn::kName; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    Shape shape =
        broadcast_shapes(in[0].shape(), in[0].dtype(), in[1].shape(), in[1].dtype(), name(), loc);
    return {{shape, DType::Bool, in[0].device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    if constexpr (Fn::kLogical) {
      map_binary<bool, bool, bool>(as_dtype(in[0], DType::Bool), as_dtype(in[1], DType::Bool),
                                   out[0], [](bool a, bool b) { return Fn::apply(a, b); });
    } else {
      DType dt = result_type(in);
      Tensor a = as_dtype(in[0], dt);
      Tensor b = as_dtype(in[1], dt);
      visit_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = compute_t<T>;
        map_binary<T, T, bool>(a, b, out[0], [](C x, C y) { return Fn::template apply<C>(x, y); });
      });
    }
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

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    map_unary<bool, bool>(as_dtype(in[0], DType::Bool), out[0], [](bool v) { return !v; });
  }

  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
};

// cond ? a : b. The result dtype is result_type({a, b}); cond only selects and gets no gradient.
class WhereOp final : public Op {
 public:
  const char* name() const override { return "where"; }

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

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
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
  return (register_op({Fn::kName, {{"a", "b"}, {"y"}}, no_attrs<BoolBinaryOp<Fn>>()}) & ...);
}
const bool compare_ops_registered =
    register_bool_binary_ops<EqFn, NeFn, LtFn, LeFn, GtFn, GeFn, LogicalAndFn, LogicalOrFn,
                             LogicalXorFn>() &
    register_op({"logical_not", {{"x"}, {"y"}}, no_attrs<LogicalNotOp>()}) &
    register_op({"where", {{"condition", "a", "b"}, {"y"}}, no_attrs<WhereOp>()});

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
