#include "kiln/ops/indexing.h"

#include <algorithm>
#include <cstring>

#include "kiln/core/parallel.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/join.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// Zero-dim tensors index like [1] ones (torch.gather and friends accept them).
Shape shape_or_one(const Tensor& t) {
  return t.dim() == 0 ? Shape{1} : t.shape();
}
Strides strides_or_one(const Tensor& t) {
  return t.dim() == 0 ? Strides{1} : t.strides();
}

void check_index_dtype(const char* op, const Tensor& index, const Loc& loc) {
  if (index.dtype() != DType::Int64)
    fail(op, loc, "expected an int64 index, but got {}", index.describe());
}

// Note [index checks]: index values are validated in one serial pass before any parallel work,
// so a bad value is an Error naming it (never a crash, and never a throw inside an OpenMP
// region, which would terminate the process). Value errors name the caller's line through
// kernel_call_site().
void check_index_values(const char* op, const Tensor& index, int64_t bound, const Tensor& x,
                        int64_t dim, const Loc& loc) {
  const std::vector<int64_t> values = index.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] < 0 || values[i] >= bound)
      fail(op, loc,
           "expected index values in [0, {}) (the size of dim {} of {}), but got {} at position {} "
           "of index {}",
           bound, dim, x.describe(), values[i], i, index.describe());
}

// Calls f(offsets) for every line of `shape` along `axis` (all dims fixed but axis), with the
// element offsets of the line's start in each operand. Lines run in parallel: ops whose lines
// write disjoint memory stay deterministic.
template <size_t N, class F>
void for_each_line(const Shape& shape, int64_t axis, const std::array<Strides, N>& strides, F&& f) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t lines = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) lines *= shape[d];
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(shape[axis], 1));
  parallel_for(0, lines, grain, [&](int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1; ++l) {
      std::array<int64_t, N> off{};
      int64_t rem = l;
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (d == axis) continue;
        const int64_t i = rem % shape[d];
        rem /= shape[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * strides[k][d];
      }
      f(off);
    }
  });
}

// gather / scatter_add: index has x's rank; index.size(d) <= x.size(d) for d != dim (and, for
// scatter_add, index.size(d) <= src.size(d) everywhere).
void check_same_rank_index(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                           const Tensor* src, const Loc& loc) {
  check_index_dtype(op, index, loc);
  if (index.dim() != x.dim() || (src && src->dim() != x.dim()))
    fail(op, loc, "expected index{} with the rank of x {}, but got index {}{}",
         src ? " and src" : "", x.describe(), index.describe(),
         src ? " and src " + src->describe() : "");
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != dim && index.size(d) > x.size(d))
      fail(op, loc,
           "expected index.size(d) <= x.size(d) for every dim d != {}, but got index {} and x {} "
           "(dim {})",
           dim, index.describe(), x.describe(), d);
    if (src && index.size(d) > src->size(d))
      fail(op, loc,
           "expected index.size(d) <= src.size(d) for every dim d, but got index {} and src {} "
           "(dim {})",
           index.describe(), src->describe(), d);
  }
}

class GatherOp final : public Op {
 public:
  explicit GatherOp(int64_t dim) : dim_(dim) {}
  const char* name() const override { return "gather"; }
  nlohmann::json attrs() const override { return {{"dim", dim_}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const int64_t d = wrap_dim(dim_, in[0].dim(), name(), loc);
    check_same_rank_index(name(), in[0], d, in[1], nullptr, loc);
    return {{in[1].shape(), in[0].dtype(), in[0].device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& outs) const override {
    const Tensor &x = in[0], &index = in[1], &out = outs[0];
    const int64_t d = wrap_dim(dim_, x.dim(), name());
    check_index_values(name(), index, shape_or_one(x)[d], x, d, kernel_call_site());
    const Shape shape = shape_or_one(index);
    const int64_t n = shape[d];
    const Strides os = strides_or_one(out), is = strides_or_one(index), xs = strides_or_one(x);
    const int64_t* pi = static_cast<const int64_t*>(index.raw_data());
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = static_cast<const T*>(x.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      for_each_line<3>(shape, d, {os, is, xs}, [&](const std::array<int64_t, 3>& off) {
        for (int64_t j = 0; j < n; ++j)
          po[off[0] + j * os[d]] = px[off[2] + pi[off[1] + j * is[d]] * xs[d]];
      });
    });
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &index = ctx.inputs[1], &g = ctx.grads[0];
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    const TensorMeta& x = ctx.input_metas[0];
    return {scatter_add(zeros(x.shape, {g.dtype(), x.device}), dim_, index, g), Tensor()};
  }

 private:
  int64_t dim_;
};

class ScatterAddOp final : public Op {
 public:
  explicit ScatterAddOp(int64_t dim) : dim_(dim) {}
  const char* name() const override { return "scatter_add"; }
  nlohmann::json attrs() const override { return {{"dim", dim_}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &index = in[1], &src = in[2];
    const int64_t d = wrap_dim(dim_, x.dim(), name(), loc);
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

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& outs) const override {
    const Tensor &x = in[0], &index = in[1], &src = in[2], &out = outs[0];
    const int64_t d = wrap_dim(dim_, x.dim(), name());
    check_index_values(name(), index, shape_or_one(x)[d], x, d, kernel_call_site());
    copy_into(out, x);
    const Shape shape = shape_or_one(index);
    const int64_t n = shape[d];
    const Strides os = strides_or_one(out), is = strides_or_one(index), ss = strides_or_one(src);
    const int64_t* pi = static_cast<const int64_t*>(index.raw_data());
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const T* ps = static_cast<const T*>(src.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      // Targets of one line differ only along d, so lines never collide; within a line the
      // additions happen in index order, which keeps duplicates deterministic.
      for_each_line<3>(shape, d, {os, is, ss}, [&](const std::array<int64_t, 3>& off) {
        for (int64_t j = 0; j < n; ++j) {
          T& target = po[off[0] + pi[off[1] + j * is[d]] * os[d]];
          target = static_cast<T>(static_cast<C>(target) + static_cast<C>(ps[off[2] + j * ss[d]]));
        }
      });
    });
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &index = ctx.inputs[1], &g = ctx.grads[0];
    const Shape& src = ctx.input_metas[2].shape;
    Tensor gx, gsrc;
    if (ctx.needs_grad[0]) gx = g;
    if (ctx.needs_grad[2]) {
      gsrc = gather(g, dim_, index);
      // src may be larger than index; its unused tail gets zero gradient.
      for (int64_t d = 0; d < static_cast<int64_t>(src.size()); ++d) {
        if (gsrc.size(d) == src[d]) continue;
        Shape pad = gsrc.shape();
        pad[d] = src[d] - gsrc.size(d);
        gsrc = cat({gsrc, zeros(pad, {gsrc.dtype()})}, d);
      }
    }
    return {gx, Tensor(), gsrc};
  }

 private:
  int64_t dim_;
};

class IndexSelectOp final : public Op {
 public:
  explicit IndexSelectOp(int64_t dim) : dim_(dim) {}
  const char* name() const override { return "index_select"; }
  nlohmann::json attrs() const override { return {{"dim", dim_}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &index = in[1];
    const int64_t d = wrap_dim(dim_, x.dim(), name(), loc);
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

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& outs) const override {
    const Tensor &x = in[0], &index = in[1], &out = outs[0];
    const int64_t d = wrap_dim(dim_, x.dim(), name());
    check_index_values(name(), index, shape_or_one(x)[d], x, d, kernel_call_site());
    if (x.dim() == 0) {
      copy_into(out, x);
      return;
    }
    // Each picked index copies one slice (x without dim d); slices go to threads.
    Shape slice_shape = x.shape();
    Strides xs = x.strides(), os = out.strides();
    slice_shape.erase(slice_shape.begin() + d);
    xs.erase(xs.begin() + d);
    os.erase(os.begin() + d);
    const std::vector<int64_t> idx = index.to_vector<int64_t>();
    const int64_t n = static_cast<int64_t>(idx.size());
    const int64_t slice = std::max<int64_t>(shape_numel(slice_shape), 1);
    const int64_t xd = x.stride(d), od = out.stride(d);
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* px = static_cast<const T*>(x.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      parallel_for(0, n, std::max<int64_t>(1, kGrain / slice), [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
          const T* src = px + idx[j] * xd;
          T* dst = po + j * od;
          if (slice_shape.empty()) {
            *dst = *src;
            continue;
          }
          for_each_row<2>(slice_shape, {os, xs},
                          [&](const std::array<int64_t, 2>& off, int64_t len,
                              const std::array<int64_t, 2>& st) {
                            for (int64_t i = 0; i < len; ++i)
                              dst[off[0] + i * st[0]] = src[off[1] + i * st[1]];
                          });
        }
      });
    });
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &index = ctx.inputs[1], &g = ctx.grads[0];
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    const TensorMeta& x = ctx.input_metas[0];
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0) return {g, Tensor()};
    // index_add expressed as scatter_add: the index is broadcast along every other dim.
    const int64_t d = wrap_dim(dim_, rank, name());
    Shape view_shape(rank, 1);
    view_shape[d] = index.numel();
    Tensor wide = expand(reshape(index, view_shape), g.shape());
    return {scatter_add(zeros(x.shape, {g.dtype(), x.device}), d, wide, g), Tensor()};
  }

 private:
  int64_t dim_;
};

class MaskedFillOp final : public Op {
 public:
  explicit MaskedFillOp(double value) : value_(value) {}
  const char* name() const override { return "masked_fill"; }
  nlohmann::json attrs() const override { return {{"value", attr_double(value_)}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &mask = in[1];
    if (mask.dtype() != DType::Bool)
      fail(name(), loc, "expected a bool mask, but got mask {} for x {}", mask.describe(),
           x.describe());
    // As torch.masked_fill (out of place), x and mask broadcast with each other.
    return {{broadcast_shapes(x.shape(), x.dtype(), mask.shape(), mask.dtype(), name(), loc),
             x.dtype(), x.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& outs) const override {
    visit_dtype(in[0].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const C value = static_cast<C>(value_);
      map_binary<T, bool, T>(in[0], in[1], outs[0], [value](C x, bool m) { return m ? value : x; });
    });
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor(), Tensor()};
    const Tensor& mask = ctx.inputs[1];
    return {sum_to(where(mask, 0.0, ctx.grads[0]), ctx.input_metas[0].shape), Tensor()};
  }

 private:
  double value_;
};

class OneHotOp final : public Op {
 public:
  explicit OneHotOp(int64_t num_classes) : num_classes_(num_classes) {}
  const char* name() const override { return "one_hot"; }
  nlohmann::json attrs() const override { return {{"num_classes", num_classes_}}; }
  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& labels = in[0];
    if (labels.dtype() != DType::Int64)
      fail(name(), loc, "expected int64 labels, but got {}", labels.describe());
    if (num_classes_ < 0)
      fail(name(), loc, "expected num_classes >= 0, but got {} for labels {}", num_classes_,
           labels.describe());
    Shape shape = labels.shape();
    shape.push_back(num_classes_);
    return {{shape, DType::Int64, labels.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& outs) const override {
    const std::vector<int64_t> labels = in[0].to_vector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] < 0 || labels[i] >= num_classes_)
        fail(name(), kernel_call_site(),
             "expected labels in [0, {}) (num_classes {}), but got {} at position {} of {}",
             num_classes_, num_classes_, labels[i], i, in[0].describe());
    int64_t* po = static_cast<int64_t*>(outs[0].raw_data());
    zero_fill(outs[0]);
    parallel_for(0, static_cast<int64_t>(labels.size()), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) po[i * num_classes_ + labels[i]] = 1;
    });
  }

 private:
  int64_t num_classes_;
};

template <class O>
OpFactory dim_op() {
  return [](const Attrs& a) -> OpPtr { return std::make_shared<const O>(a.i("dim")); };
}
KILN_REGISTER_OP("gather", (OpSchema{{"x", "index"}, {"y"}}), dim_op<GatherOp>());
KILN_REGISTER_OP("scatter_add", (OpSchema{{"x", "index", "src"}, {"y"}}), dim_op<ScatterAddOp>());
KILN_REGISTER_OP("index_select", (OpSchema{{"x", "index"}, {"y"}}), dim_op<IndexSelectOp>());
KILN_REGISTER_OP("masked_fill", (OpSchema{{"x", "mask"}, {"y"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const MaskedFillOp>(a.f("value"));
});
KILN_REGISTER_OP("one_hot", (OpSchema{{"labels"}, {"y"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const OneHotOp>(a.i("num_classes"));
});

}  // namespace

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
