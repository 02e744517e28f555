// matmul and linear: composite ops (Note [composite ops]) that keep their identity for a tracer
// and an exporter (ONNX MatMul / Gemm) while computing with reshape, expand and bmm.
#include <limits>

#include "kiln/ops/binary.h"
#include "kiln/ops/composite_op.h"
#include "kiln/ops/fused_linear.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// matmul's batch dims: a's and b's (all but the matrix dims) broadcast against each other.
Shape broadcast_batch(const Shape& batch_a, const Shape& batch_b, const Tensor& a, const Tensor& b,
                      const Loc& loc) {
  Shape batch(std::max(batch_a.size(), batch_b.size()), 1);
  for (size_t i = 1; i <= batch.size(); ++i) {
    const int64_t sa = i <= batch_a.size() ? batch_a[batch_a.size() - i] : 1;
    const int64_t sb = i <= batch_b.size() ? batch_b[batch_b.size() - i] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      fail("matmul", loc,
           "expected batch dimensions that broadcast, but got {} @ {} (batch {} vs {})",
           detail::matmul_desc(a), detail::matmul_desc(b), shape_str(batch_a), shape_str(batch_b));
    batch[batch.size() - i] = sa == 1 ? sb : sa;
  }
  return batch;
}

// [rows, last]: every dim but the last folded into rows (explicit, since -1 cannot be inferred
// when the last dim is 0).
// x as a matrix of rows [prod(leading dims), last], without naming the row count, so a traced
// gradient serves every batch size (Note [size-free shape attrs]).
Tensor rows_of(const Tensor& x, const Loc& loc) {
  return x.dim() == 1 ? unsqueeze(x, 0, loc) : flatten(x, 0, -2, loc);
}

Shape with_tail(Shape s, std::initializer_list<int64_t> tail) {
  s.insert(s.end(), tail);
  return s;
}

// Note [matmul decomposition]: when b has no batch dims, a's batch dims fold into M and one GEMM
// runs; otherwise batch dims broadcast, and an expanded operand keeps a zero batch stride that
// bmm hands to oneDNN as a broadcast instead of copying.
class MatmulOp final : public CompositeOp {
 public:
  const char* name() const override { return "matmul"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &a = in[0], &b = in[1];
    detail::check_matmul_operands(name(), a, b, 1, std::numeric_limits<int64_t>::max(), loc);
    Shape shape;
    if (b.dim() <= 2) {
      shape.assign(a.shape().begin(), a.shape().end() - 1);
      if (b.dim() == 2) shape.push_back(b.dim_size(1));
    } else {
      const int64_t m_dims = a.dim() == 1 ? 1 : 2;
      const Shape batch = broadcast_batch(Shape(a.shape().begin(), a.shape().end() - m_dims),
                                          Shape(b.shape().begin(), b.shape().end() - 2), a, b, loc);
      shape = a.dim() == 1 ? with_tail(batch, {b.dim_size(-1)})
                           : with_tail(batch, {a.dim_size(-2), b.dim_size(-1)});
    }
    return {{shape, a.dtype(), a.device()}};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(in[0].dim_size(-1));
  }

  std::vector<Tensor> decompose(const std::vector<Tensor>& in) const override {
    const Loc& loc = kernel_call_site();
    const Tensor &a = in[0], &b = in[1];
    const int64_t da = a.dim(), db = b.dim(), k = a.dim_size(-1);
    Shape lead(a.shape().begin(), a.shape().end() - 1);  // a's dims but K
    if (db <= 2) {
      const Tensor a3 = da == 2 ? unsqueeze(a, 0, loc) : reshape(a, {1, shape_numel(lead), k}, loc);
      const Tensor b3 = db == 2 ? unsqueeze(b, 0, loc) : reshape(b, {1, k, 1}, loc);
      Shape shape = lead;
      if (db == 2) shape.push_back(b.dim_size(1));
      return {reshape(bmm(a3, b3, loc), shape, loc)};
    }
    const Tensor am = da == 1 ? unsqueeze(a, 0, loc) : a;
    const int64_t m = am.dim_size(-2), n = b.dim_size(-1);
    const Shape batch = broadcast_batch(Shape(am.shape().begin(), am.shape().end() - 2),
                                        Shape(b.shape().begin(), b.shape().end() - 2), a, b, loc);
    const int64_t nb = shape_numel(batch);
    Tensor a3 = reshape(expand(am, with_tail(batch, {m, k}), loc), {nb, m, k}, loc);
    Tensor b3 = reshape(expand(b, with_tail(batch, {k, n}), loc), {nb, k, n}, loc);
    return {
        reshape(bmm(a3, b3, loc), da == 1 ? with_tail(batch, {n}) : with_tail(batch, {m, n}), loc)};
  }

  // Each operand's gradient reads only the other one.
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    return {true, false, ~uint64_t{0}, (needs_grad[1] ? 1u : 0u) | (needs_grad[0] ? 2u : 0u)};
  }

  // With A = a as a matrix stack ([k] -> [1, k]), B = b ([k] -> [k, 1]) and G the gradient with
  // the removed dims put back: dA = G B^T and dB = A^T G, summed over broadcast batch dims. When b
  // is a matrix, a's batch dims fold into rows, so dB is one GEMM.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Loc& loc = ctx.loc;
    const Shape &sa = ctx.input_metas[0].shape, &sb = ctx.input_metas[1].shape;
    const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
    Tensor g = ctx.grads[0];
    if (b_vec) g = unsqueeze(g, g.dim(), loc);
    if (a_vec) g = unsqueeze(g, g.dim() - 1, loc);
    std::vector<Tensor> grads(2);
    if (ctx.needs_grad[0]) {
      const Tensor& b = ctx.inputs[1];
      const Tensor bm = b_vec ? unsqueeze(b, 1, loc) : b;
      const Shape am_shape = a_vec ? Shape{1, sa[0]} : sa;
      // Sized from the forward's trace where it recorded one (Note [size-free backward]).
      grads[0] = reshape(sum_to(matmul(g, transpose(bm, -1, -2, loc), loc), am_shape, loc),
                         ctx.sizes_of(0), loc);
    }
    if (ctx.needs_grad[1]) {
      const Tensor& a = ctx.inputs[0];
      const Tensor am = a_vec ? unsqueeze(a, 0, loc) : a;
      const Shape bm_shape = b_vec ? Shape{sb[0], 1} : sb;
      Tensor gb;
      if (bm_shape.size() == 2) {
        gb = matmul(transpose(rows_of(am, loc), 0, 1, loc), rows_of(g, loc), loc);
      } else {
        gb = sum_to(matmul(transpose(am, -1, -2, loc), g, loc), bm_shape, loc);
      }
      grads[1] = reshape(gb, ctx.sizes_of(1), loc);
    }
    return grads;
  }
};

KILN_REGISTER_OP("matmul", (OpSchema{{"a", "b"}, {"y"}, AutocastPolicy::kLowPrecision}),
                 no_attrs<MatmulOp>());

// y = x W^T + b over the last dim of x (torch.nn.functional.linear, ONNX Gemm with transB), with
// the documented shapes only: weight [out, in], bias [out] or one value. (PyTorch 1.13 also takes
// a vector weight or a bias broadcasting over rows for some input ranks and refuses them for
// others; README's "Where kiln differs from PyTorch".)
class LinearOp final : public CompositeOp {
 public:
  explicit LinearOp(bool has_bias) : has_bias_(has_bias) {}
  const char* name() const override { return "linear"; }
  nlohmann::json attrs() const override { return {{"has_bias", has_bias_}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    return {detail::linear_meta(name(), in, has_bias_, loc)};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(in[1].dim_size(-1));
  }

  std::vector<Tensor> decompose(const std::vector<Tensor>& in) const override {
    const Loc& loc = kernel_call_site();
    Tensor y = matmul(in[0], transpose(in[1], 0, 1, loc), loc);
    return {has_bias_ ? add(y, in[2], loc) : y};
  }

  // x only for the weight's gradient, the weight only for x's; the bias never.
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    return {true, false, ~uint64_t{0}, (needs_grad[1] ? 1u : 0u) | (needs_grad[0] ? 2u : 0u)};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    return detail::linear_grads(ctx, ctx.grads[0]);
  }

 private:
  bool has_bias_;
};

KILN_REGISTER_OP(
    "linear", (OpSchema{{"input", "weight", "bias?"}, {"output"}, AutocastPolicy::kLowPrecision}),
    [](const Attrs& a) -> OpPtr { return std::make_shared<const LinearOp>(a.b("has_bias")); });

}  // namespace

TensorMeta detail::linear_meta(const char* op, const std::vector<Tensor>& in, bool has_bias,
                               const Loc& loc) {
  if (in.size() != (has_bias ? 3u : 2u))
    fail(op, loc, "expected {} inputs (input, weight{}), but got {}", has_bias ? 3 : 2,
         has_bias ? ", bias" : "", in.size());
  const Tensor &x = in[0], &w = in[1];
  if (x.dim() < 1 || w.dim() != 2 || x.dim_size(-1) != w.dim_size(1))
    fail(op, loc,
         "expected input [..., in_features] and weight [out_features, in_features], but got "
         "input {} and weight {}",
         x.describe(), w.describe());
  if (!is_floating(x.dtype()) || w.dtype() != x.dtype())
    fail(op, loc,
         "expected floating-point input and weight of one dtype, but got input {} and weight {}",
         x.describe(), w.describe());
  Shape shape(x.shape().begin(), x.shape().end() - 1);
  shape.push_back(w.dim_size(0));
  if (has_bias) {
    const Tensor& b = in[2];
    const bool fits = b.dtype() == x.dtype() && b.dim() <= 1 &&
                      (b.numel() == 1 || (b.dim() == 1 && b.dim_size(0) == w.dim_size(0)));
    if (!fits)
      fail(op, loc,
           "expected a bias of shape [{}] (or one value) and dtype {} (input {}, weight {}), "
           "but got {}",
           w.dim_size(0), dtype_name(x.dtype()), x.describe(), w.describe(), b.describe());
  }
  return {shape, x.dtype(), x.device()};
}

// dx = G W, dW = G^T x over all rows (one GEMM), db = G summed to the bias's shape.
std::vector<Tensor> detail::linear_grads(const VjpContext& ctx, const Tensor& g) {
  const Loc& loc = ctx.loc;
  std::vector<Tensor> grads(ctx.input_metas.size());
  if (ctx.needs_grad[0]) grads[0] = matmul(g, ctx.inputs[1], loc);
  if (ctx.needs_grad[1])
    grads[1] = matmul(transpose(rows_of(g, loc), 0, 1, loc), rows_of(ctx.inputs[0], loc), loc);
  if (ctx.input_metas.size() > 2 && ctx.needs_grad[2])
    grads[2] = sum_to(g, ctx.input_metas[2].shape, loc);
  return grads;
}

Tensor matmul(const Tensor& a, const Tensor& b, const Loc& loc) {
  return call_op<MatmulOp>({a, b}, loc);
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias, const Loc& loc) {
  std::vector<Tensor> in{input, weight};
  if (bias.defined()) in.push_back(bias);
  return dispatch1(std::make_shared<const LinearOp>(bias.defined()), in, loc);
}

}  // namespace kiln
