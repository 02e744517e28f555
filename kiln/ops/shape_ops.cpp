// View ops (reshape, permute, slice, select, expand, squeeze, unsqueeze) alias their input's
// storage (the copies, clone and to_dtype, are in copy_ops.cpp). Each view is a ViewOp: one
// function computing the view's geometry, used both by inference and by forward, and a gradient.
// slice_backward, the one op here that computes, has its kernel in kiln/backend/cpu/shape_ops.cpp
// (Note [kernel table]), which reads its attributes through slice_ops.h.
#include "kiln/ops/shape_ops.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/slice_ops.h"

namespace kiln {

namespace {

struct Geometry {
  Shape shape;
  Strides strides;
  int64_t offset = 0;
};

class ViewOp : public Op {
 public:
  virtual Geometry geometry(const Tensor& x, const Loc& loc) const = 0;

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    Geometry g = geometry(in[0], loc);
    TensorMeta m{std::move(g.shape), in[0].dtype(), in[0].device()};
    m.strides = std::move(g.strides);
    m.storage_offset = g.offset;
    m.alias_of = 0;
    return {m};
  }
  // Runs on meta tensors too (Note [faithful meta]): a view needs no memory.
  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>& metas) const override {
    return {make_view(in[0], metas[0].shape, metas[0].strides, metas[0].storage_offset)};
  }
  Saves saves() const override { return {false, false}; }
  bool is_view() const override { return true; }
};

// Strides that let `shape` view memory laid out as (old_shape, old_strides), if any (PyTorch's
// rule: each group of old dims that is contiguous in memory can be re-split freely).
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides,
                                    const Shape& shape) {
  if (shape_numel(old_shape) == 0 || old_shape.empty()) return contiguous_strides(shape);
  Strides out(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_stride = old_strides.back();  // stride of the innermost dim of the current chunk
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    bool chunk_ends =
        d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Shape infer_size(Shape shape, int64_t numel, const char* op, const Tensor& x, const Loc& loc) {
  int64_t known = 1, infer_at = -1;
  bool overflow = false;  // a product int64 cannot hold matches no tensor (unless a size is 0)
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_at >= 0)
        fail(op, loc, "expected at most one -1 in the shape, but got {}", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      fail(op, loc, "expected non-negative sizes, but got shape {}", shape_str(shape));
    } else {
      overflow = __builtin_mul_overflow(known, shape[i], &known) || overflow;
    }
  }
  // An overflowed product matches nothing below, unless a size is 0 (then the count is 0).
  if (overflow && std::find(shape.begin(), shape.end(), int64_t{0}) == shape.end()) known = -1;
  if (infer_at >= 0 && known > 0 && numel % known == 0) shape[infer_at] = numel / known;
  if ((infer_at >= 0 && (known <= 0 || numel % known != 0)) || (infer_at < 0 && known != numel))
    fail(op, loc, "shape {} is invalid for input {} of {} elements", shape_str(shape), x.describe(),
         numel);
  return shape;
}

class ReshapeOp final : public ViewOp {
 public:
  ReshapeOp(const char* name, Shape shape) : name_(name), shape_(std::move(shape)) {}
  const char* name() const override { return name_; }
  nlohmann::json attrs() const override { return {{"shape", shape_}}; }
  Geometry geometry(const Tensor& x, const Loc& loc) const override {
    Shape shape = infer_size(shape_, x.numel(), name_, x, loc);
    auto strides = view_strides(x.shape(), x.strides(), shape);
    if (!strides)
      fail(name_, loc,
           "expected a shape compatible with the input's strides, but got {} for {} with strides "
           "{} (use reshape, which copies)",
           shape_str(shape), x.describe(), shape_str(x.strides()));
    return {shape, *strides, x.storage_offset()};
  }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    return {reshape(ctx.grads[0], ctx.sizes_of(0))};  // Note [size-free backward]
  }

 private:
  const char* name_;
  Shape shape_;
};

class PermuteOp final : public ViewOp {
 public:
  explicit PermuteOp(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  const char* name() const override { return "permute"; }
  nlohmann::json attrs() const override { return {{"dims", dims_}}; }
  Geometry geometry(const Tensor& x, const Loc& loc) const override {
    if (static_cast<int64_t>(dims_.size()) != x.dim())
      fail("permute", loc, "expected {} dims for {}, but got dims {}", x.dim(), x.describe(),
           shape_str(dims_));
    Geometry g{Shape(dims_.size()), Strides(dims_.size()), x.storage_offset()};
    std::vector<bool> seen(dims_.size(), false);
    for (size_t i = 0; i < dims_.size(); ++i) {
      int64_t d = wrap_dim(dims_[i], x.dim(), "permute", loc);
      if (seen[d])
        fail("permute", loc, "expected a permutation, but got dims {} (dim {} repeats)",
             shape_str(dims_), d);
      seen[d] = true;
      g.shape[i] = x.shape()[d];
      g.strides[i] = x.strides()[d];
    }
    return g;
  }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    int64_t rank = static_cast<int64_t>(dims_.size());
    std::vector<int64_t> inverse(dims_.size());
    for (int64_t i = 0; i < rank; ++i) inverse[(dims_[i] % rank + rank) % rank] = i;
    return {permute(ctx.grads[0], inverse)};
  }

 private:
  std::vector<int64_t> dims_;
};

// Python-slice clamping of [start, end) for a dim of `size`.
std::pair<int64_t, int64_t> clamp_slice(std::optional<int64_t> start, std::optional<int64_t> end,
                                        int64_t size) {
  auto clamp = [size](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + size : v, 0, size); };
  int64_t s = start ? clamp(*start) : 0;
  int64_t e = end ? clamp(*end) : size;
  return {s, std::max(s, e)};
}

class SliceOp final : public ViewOp {
 public:
  SliceOp(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step)
      : dim_(dim), start_(start), end_(end), step_(step) {}
  const char* name() const override { return "slice"; }
  nlohmann::json attrs() const override {
    return {{"dim", dim_},
            {"start", attr_optional(start_)},
            {"end", attr_optional(end_)},
            {"step", step_}};
  }
  Geometry geometry(const Tensor& x, const Loc& loc) const override {
    if (x.dim() == 0)
      fail("slice", loc, "expected a tensor with at least one dim, but got {}", x.describe());
    if (step_ <= 0) fail("slice", loc, "expected a positive step, but got {}", step_);
    int64_t d = wrap_dim(dim_, x.dim(), "slice", loc);
    auto [s, e] = clamp_slice(start_, end_, x.shape()[d]);
    Geometry g{x.shape(), x.strides(), x.storage_offset() + s * x.strides()[d]};
    g.shape[d] = (e - s + step_ - 1) / step_;
    g.strides[d] *= step_;
    return g;
  }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override;

 private:
  int64_t dim_;
  std::optional<int64_t> start_, end_;
  int64_t step_;
};

// The gradient of a slice: zeros of the input's shape with `g` written into the sliced region.
class SliceBackwardOp final : public Op {
 public:
  SliceBackwardOp(Shape shape, int64_t dim, int64_t start, int64_t end, int64_t step)
      : a_{std::move(shape), dim, start, end, step} {}
  const char* name() const override { return "slice_backward"; }
  nlohmann::json attrs() const override {
    return {{"shape", a_.shape},
            {"dim", a_.dim},
            {"start", a_.start},
            {"end", a_.end},
            {"step", a_.step}};
  }
  const detail::SliceBackwardAttrs& slice_backward_attrs() const { return a_; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    Tensor probe = empty(a_.shape, {in[0].dtype(), kMeta});
    Shape expected = SliceOp(a_.dim, a_.start, a_.end, a_.step).geometry(probe, loc).shape;
    if (in[0].shape() != expected)
      fail(name(), loc, "expected a gradient of shape {} for this slice of {}, but got {}",
           shape_str(expected), shape_str(a_.shape), in[0].describe());
    return {{a_.shape, in[0].dtype(), in[0].device()}};
  }
  Saves saves() const override { return {false, false}; }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    return {slice(ctx.grads[0], a_.dim, ctx.sym_attr("/start", a_.start),
                  ctx.sym_attr("/end", a_.end), a_.step)};
  }

 private:
  detail::SliceBackwardAttrs a_;
};

// Note [size-free backward]: the input's sizes, a start or end given as a size (chunk's pieces,
// narrow(x, 0, n / 2, ...)) and an end at the end of the dim (x[1:]) come from the forward's trace.
// A bound the forward clamped or wrapped is its number.
std::vector<Tensor> SliceOp::vjp(const VjpContext& ctx) const {
  const Shape& shape = ctx.input_metas[0].shape;
  int64_t d = wrap_dim(dim_, static_cast<int64_t>(shape.size()), "slice");
  auto [s, e] = clamp_slice(start_, end_, shape[d]);
  const SymSizes sizes = ctx.sizes_of(0);
  const SymInt start = start_ == s ? ctx.sym_attr("/start", s) : SymInt(s);
  const SymInt given_end = end_ == e ? ctx.sym_attr("/end", e) : SymInt(e);
  const SymInt end = given_end.is_symbolic() ? given_end : e == shape[d] ? sizes[d] : SymInt(e);
  return {slice_backward(ctx.grads[0], sizes, d, start, end, step_)};
}

class ExpandOp final : public ViewOp {
 public:
  explicit ExpandOp(Shape shape) : shape_(std::move(shape)) {}
  const char* name() const override { return "expand"; }
  nlohmann::json attrs() const override { return {{"shape", shape_}}; }
  Geometry geometry(const Tensor& x, const Loc& loc) const override {
    if (shape_.size() < x.shape().size())
      fail("expand", loc, "expected at least {} dims in the target shape, but got {} for {}",
           x.dim(), shape_str(shape_), x.describe());
    size_t lead = shape_.size() - x.shape().size();
    Geometry g{shape_, Strides(shape_.size(), 0), x.storage_offset()};
    for (size_t i = 0; i < shape_.size(); ++i) {
      if (i < lead) {
        if (shape_[i] < 0)
          fail("expand", loc, "expected a size for new leading dim {}, but got -1", i);
        continue;
      }
      int64_t have = x.shape()[i - lead];
      if (shape_[i] == -1 || shape_[i] == have) {
        g.shape[i] = have;
        g.strides[i] = x.strides()[i - lead];
      } else if (have != 1) {
        fail("expand", loc,
             "expected singleton dims to expand, but got {} -> {} (dim {} has size {}, not 1)",
             x.describe(), shape_str(shape_), i, have);
      }
    }
    shape_numel(g.shape, "expand", loc);  // new leading dims may count more than int64 holds
    return g;
  }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    return {sum_to(ctx.grads[0], ctx.input_metas[0].shape)};
  }

 private:
  Shape shape_;
};

// Note [size-free shape attrs]: squeeze, unsqueeze and flatten say *which dims* they change,
// not the shape they produce, and infer computes the shape from the input. A graph traced with a
// symbolic batch (Note [symbolic dims] in kiln/graph/symbolic.h) then serves every batch size;
// an attr holding the output shape would hold the traced size (reshape and view keep theirs,
// where -1 stands for the size that varies).
class ShapeRuleOp : public ViewOp {
 public:
  virtual Shape target(const Tensor& x, const Loc& loc) const = 0;
  Geometry geometry(const Tensor& x, const Loc& loc) const override {
    Shape shape = target(x, loc);
    auto strides = view_strides(x.shape(), x.strides(), shape);
    if (!strides)
      fail(name(), loc, "expected an input whose strides allow a view, but got {} with strides {}",
           x.describe(), shape_str(x.strides()));
    return {shape, *strides, x.storage_offset()};
  }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    return {reshape(ctx.grads[0], ctx.sizes_of(0))};  // Note [size-free backward]
  }
};

class SqueezeOp final : public ShapeRuleOp {
 public:
  explicit SqueezeOp(std::optional<int64_t> dim) : dim_(dim) {}
  const char* name() const override { return "squeeze"; }
  nlohmann::json attrs() const override { return {{"dim", attr_optional(dim_)}}; }
  Shape target(const Tensor& x, const Loc& loc) const override {
    Shape shape;
    if (dim_) {
      const int64_t d = wrap_dim(*dim_, x.dim(), "squeeze", loc);
      shape = x.shape();
      if (x.dim() > 0 && shape[d] == 1) shape.erase(shape.begin() + d);
    } else {
      for (int64_t s : x.shape())
        if (s != 1) shape.push_back(s);
    }
    return shape;
  }
  // Size-free where the dim is named: the gradient graph of a trace serves every batch.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Shape& in = ctx.input_metas[0].shape;
    if (!dim_ || in.empty()) return ShapeRuleOp::vjp(ctx);
    const int64_t d = wrap_dim(*dim_, static_cast<int64_t>(in.size()), "squeeze");
    return {in[static_cast<size_t>(d)] == 1 ? unsqueeze(ctx.grads[0], d) : ctx.grads[0]};
  }

 private:
  std::optional<int64_t> dim_;
};

class UnsqueezeOp final : public ShapeRuleOp {
 public:
  explicit UnsqueezeOp(int64_t dim) : dim_(dim) {}
  const char* name() const override { return "unsqueeze"; }
  nlohmann::json attrs() const override { return {{"dim", dim_}}; }
  Shape target(const Tensor& x, const Loc& loc) const override {
    Shape shape = x.shape();
    shape.insert(shape.begin() + wrap_dim(dim_, x.dim() + 1, "unsqueeze", loc), 1);
    return shape;
  }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const auto rank = static_cast<int64_t>(ctx.input_metas[0].shape.size());
    return {squeeze(ctx.grads[0], wrap_dim(dim_, rank + 1, "unsqueeze"))};
  }

 private:
  int64_t dim_;
};

class FlattenOp final : public ShapeRuleOp {
 public:
  FlattenOp(int64_t start, int64_t end) : start_(start), end_(end) {}
  const char* name() const override { return "flatten"; }
  nlohmann::json attrs() const override { return {{"start", start_}, {"end", end_}}; }
  Shape target(const Tensor& x, const Loc& loc) const override {
    if (x.dim() == 0) return {1};
    const int64_t s = wrap_dim(start_, x.dim(), "flatten", loc);
    const int64_t e = wrap_dim(end_, x.dim(), "flatten", loc);
    if (s > e) fail("flatten", loc, "expected start dim <= end dim, but got {} > {}", s, e);
    Shape shape(x.shape().begin(), x.shape().begin() + s);
    int64_t n = 1;
    for (int64_t d = s; d <= e; ++d) n *= x.shape()[d];
    shape.push_back(n);
    shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
    return shape;
  }
  // The flattened dims' sizes only, so the batch stays symbolic in a traced backward.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Shape& in = ctx.input_metas[0].shape;
    if (in.empty()) return ShapeRuleOp::vjp(ctx);
    const auto rank = static_cast<int64_t>(in.size());
    const int64_t s = wrap_dim(start_, rank, "flatten"), e = wrap_dim(end_, rank, "flatten");
    const SymSizes sizes = ctx.sizes_of(0);
    return {unflatten(ctx.grads[0], s, SymSizes(sizes.begin() + s, sizes.begin() + e + 1))};
  }

 private:
  int64_t start_, end_;
};

class UnflattenOp final : public ShapeRuleOp {
 public:
  UnflattenOp(int64_t dim, Shape sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  const char* name() const override { return "unflatten"; }
  nlohmann::json attrs() const override { return {{"dim", dim_}, {"sizes", sizes_}}; }
  Shape target(const Tensor& x, const Loc& loc) const override {
    const int64_t d = wrap_dim(dim_, x.dim(), "unflatten", loc);
    const int64_t have = x.shape()[d];
    Shape sizes = sizes_;
    int64_t known = 1, unknown = -1;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == -1 && unknown < 0) {
        unknown = static_cast<int64_t>(i);
        continue;
      }
      if (sizes[i] < 0)
        fail("unflatten", loc, "expected sizes >= 0 with at most one -1, but got {} for {}",
             shape_str(sizes_), x.describe());
      known *= sizes[i];
    }
    if (unknown >= 0) {
      if (known == 0)
        fail("unflatten", loc, "cannot infer the -1 in sizes {} when the others multiply to 0",
             shape_str(sizes_));
      sizes[static_cast<size_t>(unknown)] = have / known;
      known *= have / known;
    }
    if (sizes.empty() || known != have)
      fail("unflatten", loc, "expected sizes that multiply to dim {}'s size {}, but got {} for {}",
           d, have, shape_str(sizes_), x.describe());
    Shape shape(x.shape().begin(), x.shape().begin() + d);
    shape.insert(shape.end(), sizes.begin(), sizes.end());
    shape.insert(shape.end(), x.shape().begin() + d + 1, x.shape().end());
    return shape;
  }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const auto rank = static_cast<int64_t>(ctx.input_metas[0].shape.size());
    const int64_t d = wrap_dim(dim_, rank, "unflatten");
    return {flatten(ctx.grads[0], d, d + static_cast<int64_t>(sizes_.size()) - 1)};
  }

 private:
  int64_t dim_;
  Shape sizes_;
};

// One op class, two names: the name says which function the caller used (errors, traces).
template <const char* kName>
OpPtr make_reshape(const Attrs& a) {
  return std::make_shared<const ReshapeOp>(kName, a.ints("shape"));
}
constexpr char kReshape[] = "reshape", kView[] = "view";
const OpSchema kViewSchema{{"x"}, {"y"}, AutocastPolicy::kKeep};
KILN_REGISTER_OP(kReshape, kViewSchema, make_reshape<kReshape>);
KILN_REGISTER_OP(kView, kViewSchema, make_reshape<kView>);
KILN_REGISTER_OP("squeeze", kViewSchema, [](const Attrs& a) -> OpPtr {
  return std::make_shared<const SqueezeOp>(a.opt_i("dim"));
});
KILN_REGISTER_OP("unsqueeze", kViewSchema, [](const Attrs& a) -> OpPtr {
  return std::make_shared<const UnsqueezeOp>(a.i("dim"));
});
KILN_REGISTER_OP("flatten", kViewSchema, [](const Attrs& a) -> OpPtr {
  return std::make_shared<const FlattenOp>(a.i("start"), a.i("end"));
});
KILN_REGISTER_OP("unflatten", kViewSchema, [](const Attrs& a) -> OpPtr {
  return std::make_shared<const UnflattenOp>(a.i("dim"), a.ints("sizes"));
});
KILN_REGISTER_OP("permute", kViewSchema, [](const Attrs& a) -> OpPtr {
  return std::make_shared<const PermuteOp>(a.ints("dims"));
});
KILN_REGISTER_OP("slice", kViewSchema, [](const Attrs& a) -> OpPtr {
  return std::make_shared<const SliceOp>(a.i("dim"), a.opt_i("start"), a.opt_i("end"), a.i("step"));
});
KILN_REGISTER_OP("slice_backward",
                 (OpSchema{{"grad_output"}, {"grad_input"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const SliceBackwardOp>(
                       a.ints("shape"), a.i("dim"), a.i("start"), a.i("end"), a.i("step"));
                 });
KILN_REGISTER_OP("expand", kViewSchema, [](const Attrs& a) -> OpPtr {
  return std::make_shared<const ExpandOp>(a.ints("shape"));
});

}  // namespace

Tensor reshape(const Tensor& x, SizeList sizes, const Loc& loc) {
  const SymAttrScope sym("reshape", sizes.sym_attrs("/shape"));
  Shape shape = sizes.take();
  Shape target = infer_size(shape, x.numel(), "reshape", x, loc);
  if (!view_strides(x.shape(), x.strides(), target))  // a copy: not a view of x
    return detail::release_view(
        call_op<ReshapeOp>({contiguous(x, loc)}, loc, "reshape", std::move(shape)));
  return call_op<ReshapeOp>({x}, loc, "reshape", std::move(shape));
}

const detail::SliceBackwardAttrs& detail::slice_backward_attrs(const Op& op) {
  const auto* o = dynamic_cast<const SliceBackwardOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("slice_backward_attrs of op '") + op.name() + "'");
  return o->slice_backward_attrs();
}

Tensor detail::slice_view(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Geometry g = SliceOp(dim, start, end, step).geometry(x, Loc::current());
  return make_view(x, g.shape, g.strides, g.offset);
}

Tensor detail::release_view(Tensor t) {
  t.impl()->is_view_ = false;
  return t;
}

Tensor view(const Tensor& x, SizeList shape, const Loc& loc) {
  const SymAttrScope sym("view", shape.sym_attrs("/shape"));
  return call_op<ReshapeOp>({x}, loc, "view", shape.take());
}

Tensor permute(const Tensor& x, std::vector<int64_t> dims, const Loc& loc) {
  return call_op<PermuteOp>({x}, loc, std::move(dims));
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1, const Loc& loc) {
  if (x.dim() == 0) {  // as PyTorch: dims in [-1, 0], and a new view, not the same handle
    wrap_dim(d0, 0, "transpose", loc);
    wrap_dim(d1, 0, "transpose", loc);
    return permute(x, {}, loc);
  }
  std::vector<int64_t> dims(x.dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(d0, x.dim(), "transpose", loc)],
            dims[wrap_dim(d1, x.dim(), "transpose", loc)]);
  return permute(x, dims, loc);
}

Tensor slice_backward(const Tensor& grad, SizeList input_shape, int64_t dim, SymInt start,
                      SymInt end, int64_t step, const Loc& loc) {
  SymAttrs attrs = input_shape.sym_attrs("/shape");
  if (start.is_symbolic()) attrs.push_back({"/start", start});
  if (end.is_symbolic()) attrs.push_back({"/end", end});
  const SymAttrScope sym("slice_backward", std::move(attrs));
  return call_op<SliceBackwardOp>({grad}, loc, input_shape.take(), dim, start.hint(), end.hint(),
                                  step);
}

Tensor slice(const Tensor& x, int64_t dim, std::optional<SymInt> start, std::optional<SymInt> end,
             int64_t step, const Loc& loc) {
  SymAttrs attrs;
  if (start && start->is_symbolic()) attrs.push_back({"/start", *start});
  if (end && end->is_symbolic()) attrs.push_back({"/end", *end});
  const SymAttrScope sym("slice", std::move(attrs));
  auto hint = [](const std::optional<SymInt>& s) {
    return s ? std::optional<int64_t>(s->hint()) : std::nullopt;
  };
  return call_op<SliceOp>({x}, loc, dim, hint(start), hint(end), step);
}

Tensor narrow(const Tensor& x, int64_t dim, SymInt start, SymInt length, const Loc& loc) {
  int64_t d = wrap_dim(dim, x.dim(), "narrow", loc);
  int64_t size = x.shape()[d];
  // The checks read the numbers; the slice keeps the expressions (Note [size lists]).
  if (start.hint() < 0) start = start + sym_size(x, d);
  if (start.hint() < 0 || length.hint() < 0 || start.hint() + length.hint() > size)
    fail("narrow", loc,
         "expected start + length <= {} along dim {}, but got start {} and length {} "
         "for {}",
         size, d, start, length, x.describe());
  return slice(x, d, start, start + length, 1, loc);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index, const Loc& loc) {
  int64_t d = wrap_dim(dim, x.dim(), "select", loc);
  int64_t size = x.shape()[d];
  if (index < -size || index >= size)
    fail("select", loc, "expected an index in [{}, {}) along dim {}, but got {} for {}", -size,
         size, d, index, x.describe());
  if (index < 0) index += size;
  return squeeze(slice(x, d, index, index + 1, 1, loc), d, loc);
}

Tensor expand(const Tensor& x, SizeList shape, const Loc& loc) {
  const SymAttrScope sym("expand", shape.sym_attrs("/shape"));
  return call_op<ExpandOp>({x}, loc, shape.take());
}

Tensor broadcast_to(const Tensor& x, SizeList shape, const Loc& loc) {
  return expand(x, std::move(shape), loc);
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim, const Loc& loc) {
  return call_op<SqueezeOp>({x}, loc, dim);
}

Tensor unsqueeze(const Tensor& x, int64_t dim, const Loc& loc) {
  return call_op<UnsqueezeOp>({x}, loc, dim);
}

// A view where the strides allow one, else a view of a contiguous copy (as reshape).
Tensor flatten(const Tensor& x, int64_t start, int64_t end, const Loc& loc) {
  const FlattenOp op(start, end);
  if (!view_strides(x.shape(), x.strides(), op.target(x, loc)))
    return detail::release_view(call_op<FlattenOp>({contiguous(x, loc)}, loc, start, end));
  return call_op<FlattenOp>({x}, loc, start, end);
}

// Always a view: splitting one dim never needs other strides.
Tensor unflatten(const Tensor& x, int64_t dim, SizeList sizes, const Loc& loc) {
  const SymAttrScope sym("unflatten", sizes.sym_attrs("/sizes"));
  return call_op<UnflattenOp>({x}, loc, dim, sizes.take());
}

}  // namespace kiln
