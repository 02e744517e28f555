// embedding (row lookup) and its gradient embedding_backward (row scatter-add); each is the
// other's vjp, so gradients of any order stay within these two ops. Definitions only (attributes,
// infer, vjp, the index check); the kernels are in kiln/backend/cpu/embedding_ops.cpp (Note
// [kernel table]).
#include "kiln/ops/embedding.h"

#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/embedding_ops.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

nlohmann::json padding_json(std::optional<int64_t> padding_idx) {
  return padding_idx ? nlohmann::json(*padding_idx) : nlohmann::json(nullptr);
}

void check_indices_dtype(const char* op, const Tensor& indices, const Loc& loc) {
  if (indices.dtype() != DType::Int64)
    fail(op, loc, "expected int64 indices, but got {}", indices.describe());
}

class EmbeddingOp final : public Op {
 public:
  explicit EmbeddingOp(std::optional<int64_t> padding_idx) : padding_idx_(padding_idx) {}
  const char* name() const override { return "embedding"; }
  nlohmann::json attrs() const override { return {{"padding_idx", padding_json(padding_idx_)}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &w = in[0], &indices = in[1];
    if (w.dim() != 2)
      fail(name(), loc, "expected a weight of rank 2 [V, D], but got {}", w.describe());
    check_indices_dtype(name(), indices, loc);
    Shape shape = indices.shape();
    shape.push_back(w.dim_size(1));
    return {{shape, w.dtype(), w.device()}};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    return {embedding_backward(ctx.grads[0], ctx.inputs[1], ctx.size_of(0, 0), padding_idx_),
            Tensor()};
  }

 private:
  std::optional<int64_t> padding_idx_;  // in [0, V)
};

class EmbeddingBackwardOp final : public Op {
 public:
  EmbeddingBackwardOp(int64_t num_weights, std::optional<int64_t> padding_idx)
      : a_{num_weights, padding_idx} {}
  const char* name() const override { return "embedding_backward"; }
  nlohmann::json attrs() const override {
    return {{"num_weights", a_.num_weights}, {"padding_idx", padding_json(a_.padding_idx)}};
  }
  const detail::EmbeddingBackwardAttrs& embedding_backward_attrs() const { return a_; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &g = in[0], &indices = in[1];
    check_indices_dtype(name(), indices, loc);
    if (!is_floating(g.dtype()))
      fail(name(), loc, "expected a floating-point grad, but got {}", g.describe());
    if (g.dim() != indices.dim() + 1 ||
        !std::equal(indices.shape().begin(), indices.shape().end(), g.shape().begin()))
      fail(name(), loc,
           "expected grad of shape indices.shape + [D], but got grad {} for indices {}",
           g.describe(), indices.describe());
    if (a_.num_weights < 0)
      fail(name(), loc, "expected num_weights >= 0, but got {} for grad {}", a_.num_weights,
           g.describe());
    return {{{a_.num_weights, g.shape().back()}, g.dtype(), g.device()}};
  }

  // Linear in grad; the adjoint of the scatter-add is the lookup, with padding rows zeroed.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    const Tensor& indices = ctx.inputs[1];
    Tensor gg = embedding(ctx.grads[0], indices);
    if (a_.padding_idx)
      gg = where(unsqueeze(eq(indices, static_cast<double>(*a_.padding_idx)), -1), 0.0, gg);
    return {gg, Tensor()};
  }

 private:
  detail::EmbeddingBackwardAttrs a_;
};

std::optional<int64_t> wrap_padding(const char* op, std::optional<int64_t> padding_idx,
                                    int64_t num_rows, const Tensor& t, const Loc& loc) {
  if (!padding_idx) return std::nullopt;
  if (*padding_idx < -num_rows || *padding_idx >= num_rows)
    fail(op, loc, "expected padding_idx in [-{}, {}) (V = {}), but got {} for {}", num_rows,
         num_rows, num_rows, *padding_idx, t.describe());
  return *padding_idx < 0 ? *padding_idx + num_rows : *padding_idx;
}

KILN_REGISTER_OP("embedding", (OpSchema{{"weight", "indices"}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const EmbeddingOp>(a.opt_i("padding_idx"));
                 });
KILN_REGISTER_OP("embedding_backward",
                 (OpSchema{{"grad_output", "indices"}, {"grad_weight"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const EmbeddingBackwardOp>(a.i("num_weights"),
                                                                      a.opt_i("padding_idx"));
                 });

}  // namespace

// Values are checked serially before any parallel work (see Note [index checks] in
// indexing.cpp); kernels name the caller's line through kernel_call_site().
std::vector<int64_t> detail::checked_embedding_indices(const char* op, const Tensor& indices,
                                                       int64_t num_rows, const std::string& rows_of,
                                                       const Loc& loc) {
  std::vector<int64_t> idx = indices.to_vector<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i)
    if (idx[i] < 0 || idx[i] >= num_rows)
      fail(op, loc,
           "expected indices in [0, {}) (V = {}, the number of rows of {}), but got index {} at "
           "position {} of indices {}",
           num_rows, num_rows, rows_of, idx[i], i, indices.describe());
  return idx;
}

const detail::EmbeddingBackwardAttrs& detail::embedding_backward_attrs(const Op& op) {
  const auto* o = dynamic_cast<const EmbeddingBackwardOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr,
                       std::string("embedding_backward_attrs of op '") + op.name() + "'");
  return o->embedding_backward_attrs();
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx,
                 const Loc& loc) {
  if (weight.dim() != 2)
    fail("embedding", loc, "expected a weight of rank 2 [V, D], but got {}", weight.describe());
  return call_op<EmbeddingOp>(
      {weight, indices}, loc,
      wrap_padding("embedding", padding_idx, weight.dim_size(0), weight, loc));
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, SymInt num_weights,
                          std::optional<int64_t> padding_idx, const Loc& loc) {
  SymAttrs sym;
  if (num_weights.is_symbolic()) sym.push_back({"/num_weights", num_weights});
  const SymAttrScope scope("embedding_backward", std::move(sym));
  return call_op<EmbeddingBackwardOp>(
      {grad, indices}, loc, num_weights.hint(),
      wrap_padding("embedding_backward", padding_idx, num_weights.hint(), grad, loc));
}

}  // namespace kiln
