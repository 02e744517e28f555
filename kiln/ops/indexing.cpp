// Indexing ops: gather, scatter_add, index_select, masked_fill and one_hot (definitions:
// attributes, infer, vjp). Their kernels are in kiln/backend/cpu/indexing_ops.cpp (Note [kernel
// table]); the checks of index values they run, and the attribute accessors, are here
// (indexing_ops.h).
#include "kiln/ops/indexing.h"

#include <algorithm>

#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing_ops.h"
#include "kiln/ops/join.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

void check_index_dtype(const char* op, const Tensor& index, const Loc& loc) {
  if (index.dtype() != DType::Int64)
    fail(op, loc, "expected an int64 index, but got {}", index.describe());
}

// gather / scatter_add: index has x's rank; index.dim_size(d) <= x.dim_size(d) for d != dim (and,
// for scatter_add, index.dim_size(d) <= src.dim_size(d) everywhere).
void check_same_rank_index(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                           const Tensor* src, const Loc& loc) {
  check_index_dtype(op, index, loc);
  if (index.dim() != x.dim() || (src && src->dim() != x.dim()))
    fail(op, loc, "expected index{} with the rank of x {}, but got index {}{}",
         src ? " and src" : "", x.describe(), index.describe(),
         src ? " and src " + src->describe() : "");
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != dim && index.dim_size(d) > x.dim_size(d))
      fail(op, loc,
           "expected index.dim_size(d) <= x.dim_size(d) for every dim d != {}, but got index {} "
           "and x {} "
           "(dim {})",
           dim, index.describe(), x.describe(), d);
    if (src && index.dim_size(d) > src->dim_size(d))
      fail(op, loc,
           "expected index.dim_size(d) <= src.dim_size(d) for every dim d, but got index {} and "
           "src {} "
           "(dim {})",
           index.describe(), src->describe(), d);
  }
}

// gather, scatter_add and index_select, so that index_dim_attrs() takes one cast.
class IndexDimOp : public Op {
 public:
  explicit IndexDimOp(int64_t dim) : a_{dim} {}
  nlohmann::json attrs() const override { return {{"dim", a_.dim}}; }
  const detail::IndexDimAttrs& index_dim_attrs() const { return a_; }

 protected:
  detail::IndexDimAttrs a_;
};

class GatherOp final : public IndexDimOp {
 public:
  explicit GatherOp(int64_t dim) : IndexDimOp(dim) {}
  const char* name() const override { return "gather"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const int64_t d = wrap_dim(a_.dim, in[0].dim(), name(), loc);
    check_same_rank_index(name(), in[0], d, in[1], nullptr, loc);
    return {{in[1].shape(), in[0].dtype(), in[0].device()}};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &index = ctx.inputs[1], &g = ctx.grads[0];
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    const TensorMeta& x = ctx.input_metas[0];
    return {scatter_add(zeros(ctx.sizes_of(0), {g.dtype(), x.device}), a_.dim, index, g), Tensor()};
  }
};

class ScatterAddOp final : public IndexDimOp {
 public:
  explicit ScatterAddOp(int64_t dim) : IndexDimOp(dim) {}
  const char* name() const override { return "scatter_add"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &index = in[1], &src = in[2];
    const int64_t d = wrap_dim(a_.dim, x.dim(), name(), loc);
    if (src.dtype() != x.dtype())
      fail(name(), loc, "expected src with the dtype of x {}, but got src {}", x.describe(),
           src.describe());
    check_same_rank_index(name(), x, d, index, &src, loc);
    return {{x.shape(), x.dtype(), x.device()}};
  }
  // x's gradient is the output gradient as it is; only src's reads the index.
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    return {true, false, ~uint64_t{0}, needs_grad[2] ? uint64_t{2} : uint64_t{0}};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &index = ctx.inputs[1], &g = ctx.grads[0];
    const Shape& src = ctx.input_metas[2].shape;
    Tensor gx, gsrc;
    if (ctx.needs_grad[0]) gx = g;
    if (ctx.needs_grad[2]) {
      gsrc = gather(g, a_.dim, index);
      // src may be larger than index; its unused tail gets zero gradient.
      for (int64_t d = 0; d < static_cast<int64_t>(src.size()); ++d) {
        if (gsrc.dim_size(d) == src[d]) continue;
        Shape pad = gsrc.shape();
        pad[d] = src[d] - gsrc.dim_size(d);
        gsrc = cat({gsrc, zeros(pad, {gsrc.dtype()})}, d);
      }
    }
    return {gx, Tensor(), gsrc};
  }
};

class IndexSelectOp final : public IndexDimOp {
 public:
  explicit IndexSelectOp(int64_t dim) : IndexDimOp(dim) {}
  const char* name() const override { return "index_select"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &index = in[1];
    const int64_t d = wrap_dim(a_.dim, x.dim(), name(), loc);
    check_index_dtype(name(), index, loc);
    if (index.dim() > 1) fail(name(), loc, "expected a 1-D index, but got {}", index.describe());
    Shape shape = x.shape();
    if (x.dim() == 0) {
      if (index.numel() != 1)
        fail(name(), loc, "expected an index of one element for zero-dim x {}, but got {}",
             x.describe(), index.describe());
    } else {
      shape[d] = index.numel();
    }
    return {{shape, x.dtype(), x.device()}};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &index = ctx.inputs[1], &g = ctx.grads[0];
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    const TensorMeta& x = ctx.input_metas[0];
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0) return {g, Tensor()};
    // index_add expressed as scatter_add: the index is broadcast along every other dim.
    const int64_t d = wrap_dim(a_.dim, rank, name());
    Shape view_shape(rank, 1);
    view_shape[d] = -1;  // sizes from the tensors, not numbers (Note [size-free backward])
    Tensor wide = expand(reshape(index, view_shape), g.sizes());
    return {scatter_add(zeros(ctx.sizes_of(0), {g.dtype(), x.device}), d, wide, g), Tensor()};
  }
};

class MaskedFillOp final : public Op {
 public:
  explicit MaskedFillOp(double value) : a_{value} {}
  const char* name() const override { return "masked_fill"; }
  nlohmann::json attrs() const override { return {{"value", attr_double(a_.value)}}; }
  const detail::MaskedFillAttrs& masked_fill_attrs() const { return a_; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &mask = in[1];
    if (mask.dtype() != DType::Bool)
      fail(name(), loc, "expected a bool mask, but got mask {} for x {}", mask.describe(),
           x.describe());
    // As torch.masked_fill (out of place), x and mask broadcast with each other.
    return {{broadcast_shapes(x.shape(), x.dtype(), mask.shape(), mask.dtype(), name(), loc),
             x.dtype(), x.device()}};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    const Tensor& mask = ctx.inputs[1];
    return {sum_to(where(mask, 0.0, ctx.grads[0]), ctx.input_metas[0].shape), Tensor()};
  }

 private:
  detail::MaskedFillAttrs a_;
};

class OneHotOp final : public Op {
 public:
  explicit OneHotOp(int64_t num_classes) : a_{num_classes} {}
  const char* name() const override { return "one_hot"; }
  nlohmann::json attrs() const override { return {{"num_classes", a_.num_classes}}; }
  const detail::OneHotAttrs& one_hot_attrs() const { return a_; }
  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& labels = in[0];
    if (labels.dtype() != DType::Int64)
      fail(name(), loc, "expected int64 labels, but got {}", labels.describe());
    if (a_.num_classes < 0)
      fail(name(), loc, "expected num_classes >= 0, but got {} for labels {}", a_.num_classes,
           labels.describe());
    Shape shape = labels.shape();
    shape.push_back(a_.num_classes);
    return {{shape, DType::Int64, labels.device()}};
  }

 private:
  detail::OneHotAttrs a_;
};

template <class O>
OpFactory dim_op() {
  return [](const Attrs& a) -> OpPtr { return std::make_shared<const O>(a.i("dim")); };
}
KILN_REGISTER_OP("gather", (OpSchema{{"x", "index"}, {"y"}, AutocastPolicy::kKeep}),
                 dim_op<GatherOp>());
KILN_REGISTER_OP("scatter_add", (OpSchema{{"x", "index", "src"}, {"y"}, AutocastPolicy::kPromote}),
                 dim_op<ScatterAddOp>());
KILN_REGISTER_OP("index_select", (OpSchema{{"x", "index"}, {"y"}, AutocastPolicy::kKeep}),
                 dim_op<IndexSelectOp>());
KILN_REGISTER_OP("masked_fill", (OpSchema{{"x", "mask"}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const MaskedFillOp>(a.f("value"));
                 });
KILN_REGISTER_OP("one_hot", (OpSchema{{"labels"}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const OneHotOp>(a.i("num_classes"));
                 });

}  // namespace

// Note [index checks]: index values are validated in one serial pass before any parallel work,
// so a bad value is an Error naming it (never a crash, and never a throw inside an OpenMP
// region, which would terminate the process). Value errors name the caller's line through
// kernel_call_site().
void detail::check_index_values(const char* op, const Tensor& index, int64_t bound, const Tensor& x,
                                int64_t dim, const Loc& loc) {
  const std::vector<int64_t> values = index.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] < 0 || values[i] >= bound)
      fail(op, loc,
           "expected index values in [0, {}) (the size of dim {} of {}), but got {} at position {} "
           "of index {}",
           bound, dim, x.describe(), values[i], i, index.describe());
}

std::vector<int64_t> detail::checked_one_hot_labels(const char* op, const Tensor& labels,
                                                    int64_t num_classes, const Loc& loc) {
  std::vector<int64_t> values = labels.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] < 0 || values[i] >= num_classes)
      fail(op, loc, "expected labels in [0, {}) (num_classes {}), but got {} at position {} of {}",
           num_classes, num_classes, values[i], i, labels.describe());
  return values;
}

const detail::IndexDimAttrs& detail::index_dim_attrs(const Op& op) {
  const auto* o = dynamic_cast<const IndexDimOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("index_dim_attrs of op '") + op.name() + "'");
  return o->index_dim_attrs();
}

const detail::MaskedFillAttrs& detail::masked_fill_attrs(const Op& op) {
  const auto* o = dynamic_cast<const MaskedFillOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("masked_fill_attrs of op '") + op.name() + "'");
  return o->masked_fill_attrs();
}

const detail::OneHotAttrs& detail::one_hot_attrs(const Op& op) {
  const auto* o = dynamic_cast<const OneHotOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("one_hot_attrs of op '") + op.name() + "'");
  return o->one_hot_attrs();
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const Loc& loc) {
  return call_op<GatherOp>({x, index}, loc, dim);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                   const Loc& loc) {
  return call_op<ScatterAddOp>({x, index, src}, loc, dim);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const Loc& loc) {
  return call_op<IndexSelectOp>({x, index}, loc, dim);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, const Loc& loc) {
  return call_op<MaskedFillOp>({x, mask}, loc, value);
}

Tensor one_hot(const Tensor& labels, int64_t num_classes, const Loc& loc) {
  if (labels.dtype() != DType::Int64)
    fail("one_hot", loc, "expected int64 labels, but got {}", labels.describe());
  if (num_classes < -1)
    fail("one_hot", loc, "expected num_classes >= 0 or -1 (infer), but got {} for labels {}",
         num_classes, labels.describe());
  if (num_classes == -1) {
    // The number of classes depends on the values: shape-only (meta) runs cannot infer it.
    if (labels.is_meta())
      fail("one_hot", loc, "expected an explicit num_classes for meta labels, but got -1 for {}",
           labels.describe());
    if (labels.numel() == 0)
      fail("one_hot", loc, "expected non-empty labels to infer num_classes, but got {}",
           labels.describe());
    const std::vector<int64_t> values = labels.to_vector<int64_t>();
    num_classes = *std::max_element(values.begin(), values.end()) + 1;
  }
  return call_op<OneHotOp>({labels}, loc, num_classes);
}

}  // namespace kiln
