// Reductions: one strided kernel (reduce_loop) parameterized by a small reducer struct per op, the
// primitive ops built on it (sum, prod, max, min, argmax, argmin) and the composites mean and
// sum_to. var/std/logsumexp/norm live in reduce_stats.cpp.
#include "kiln/ops/reduce.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/reduce_kernels.h"
#include "kiln/ops/registry.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace detail {

namespace {
ReduceDims normalize(std::string_view op, const Shape& shape, const Dims& dims, bool keepdim,
                     const Loc& loc, const std::function<std::string()>& describe) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  ReduceDims rd;
  rd.reduced.assign(shape.size(), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, rank, op, loc);
    if (rank == 0) continue;  // a zero-dim tensor reduces over "dim 0", which it does not have
    if (rd.reduced[w])
      fail(op, loc, "expected distinct dims, but got dim {} twice in {} for {}", w, shape_str(dims),
           describe());
    rd.reduced[w] = true;
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (rd.reduced[d]) {
      rd.dims.push_back(d);
      rd.count *= shape[d];
      rd.keep_shape.push_back(1);
      if (keepdim) rd.out_shape.push_back(1);
    } else {
      rd.keep_shape.push_back(shape[d]);
      rd.out_shape.push_back(shape[d]);
    }
  }
  return rd;
}
}  // namespace

ReduceDims normalize_reduce_dims(std::string_view op, const Tensor& x, const Dims& dims,
                                 bool keepdim, const Loc& loc) {
  return normalize(op, x.shape(), dims, keepdim, loc, [&] { return x.describe(); });
}

Tensor unsqueeze_reduced(const Tensor& g, const ReduceDims& rd) {
  return g.shape() == rd.keep_shape ? g : reshape(g, rd.keep_shape);
}

}  // namespace detail

namespace {

using detail::ReduceDims;

// Gradient-side re-normalization: inputs already passed infer, so errors cannot happen here.
ReduceDims dims_of(const TensorMeta& m, const Dims& dims, bool keepdim) {
  return detail::normalize("reduce", m.shape, dims, keepdim, Loc::current(),
                           [] { return std::string(); });
}

// A set of input dims (kept or reduced) collapsed as far as the strides allow, so that loops are
// long. Collapsing keeps the row-major order of the set, so a running counter over it is still
// the row-major index (which argmax reports and the contiguous output is laid out in).
struct DimSet {
  Shape sizes;
  Strides strides;
};

DimSet collapse(const Tensor& x, const std::vector<bool>& reduced, bool want) {
  DimSet s;
  for (size_t d = 0; d < reduced.size(); ++d) {
    int64_t size = x.shape()[d], stride = x.strides()[d];
    if (reduced[d] != want || size == 1) continue;
    if (!s.sizes.empty() && s.strides.back() == stride * size) {
      s.sizes.back() *= size;
      s.strides.back() = stride;
    } else {
      s.sizes.push_back(size);
      s.strides.push_back(stride);
    }
  }
  return s;
}

// Element offset of row-major index `i` within the first `n` dims of `s`.
int64_t offset_of(int64_t i, const DimSet& s, size_t n) {
  int64_t off = 0;
  for (size_t d = n; d-- > 0;) {
    off += (i % s.sizes[d]) * s.strides[d];
    i /= s.sizes[d];
  }
  return off;
}

template <class A, class C>
void wrap_add(A& a, C v) {
  if constexpr (std::is_integral_v<A>)  // two's-complement wrap like PyTorch, without UB
    a = static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(static_cast<A>(v)));
  else
    a += static_cast<A>(v);
}

template <class A, class C>
void wrap_mul(A& a, C v) {
  if constexpr (std::is_integral_v<A>)
    a = static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(static_cast<A>(v)));
  else
    a *= static_cast<A>(v);
}

template <class C>
bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return std::isnan(v);
  else
    return false;
}

// Start value of a max (kMax) or min scan: -inf/+inf for floats, the type's limits otherwise.
template <class C, bool kMax>
C extreme_init() {
  using L = std::numeric_limits<C>;
  if constexpr (L::has_infinity) return kMax ? -L::infinity() : L::infinity();
  return kMax ? L::lowest() : L::max();
}

// Reducers: Acc is the accumulator, Out the stored type; step sees values in compute type C and
// their row-major index within the reduced set.
template <class C, class T>
using sum_out_t = std::conditional_t<std::is_floating_point_v<C>, T, int64_t>;
template <class C>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<C>, double, int64_t>;

template <class C, class T>
struct SumReducer {
  using Acc = sum_acc_t<C>;
  using Out = sum_out_t<C, T>;
  Acc init() const { return Acc(0); }
  void step(Acc& a, C v, int64_t) const { wrap_add(a, v); }
  Out finish(Acc a) const { return static_cast<Out>(a); }
};

template <class C, class T>
struct ProdReducer {
  using Acc = sum_acc_t<C>;
  using Out = sum_out_t<C, T>;
  Acc init() const { return Acc(1); }
  void step(Acc& a, C v, int64_t) const { wrap_mul(a, v); }
  Out finish(Acc a) const { return static_cast<Out>(a); }
};

// NaN wins (and stays) like PyTorch's max/min.
template <class C, class T, bool kMax>
struct ExtremumReducer {
  using Acc = C;
  using Out = T;
  Acc init() const { return extreme_init<C, kMax>(); }
  void step(Acc& a, C v, int64_t) const {
    if (!is_nan(a) && (is_nan(v) || (kMax ? v > a : v < a))) a = v;
  }
  Out finish(Acc a) const { return static_cast<Out>(a); }
};

// First occurrence wins: only a strictly better value moves the index.
template <class C, class T, bool kMax>
struct ArgReducer {
  struct Acc {
    C v;
    int64_t i;
  };
  using Out = int64_t;
  Acc init() const { return {extreme_init<C, kMax>(), 0}; }
  void step(Acc& a, C v, int64_t i) const {
    if (!is_nan(a.v) && (is_nan(v) || (kMax ? v > a.v : v < a.v))) a = {v, i};
  }
  Out finish(Acc a) const { return a.i; }
};

// Note [deterministic reduction]: every output accumulates its reduced elements sequentially in
// row-major order of the reduced dims, whichever path runs and however outputs are split across
// threads, so results are bitwise independent of the thread count. When the innermost kept dim
// is contiguous in x and the reduction is not innermost (a bias gradient summing over the batch),
// a block of neighbouring outputs advances together so that memory is read row by row.
template <class T, class R>
void reduce_loop(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced,
                 const R& r) {
  using C = compute_t<T>;
  using Acc = typename R::Acc;
  using Out = typename R::Out;
  const T* px = static_cast<const T*>(x.raw_data());
  Out* po = static_cast<Out*>(out.raw_data());
  const DimSet kept = collapse(x, reduced, false);
  const DimSet red = collapse(x, reduced, true);
  const int64_t outputs = out.numel();
  if (outputs == 0) return;
  const size_t nr = red.sizes.size();
  const int64_t inner = nr ? red.sizes.back() : 1;
  const int64_t inner_stride = nr ? red.strides.back() : 0;
  const int64_t count = shape_numel(red.sizes);
  // Offsets of the reduced rows (all reduced dims but the innermost), shared by every output.
  std::vector<int64_t> rows;
  if (count > 0) {
    rows.resize(static_cast<size_t>(count / inner));
    for (size_t i = 0; i < rows.size(); ++i)
      rows[i] = nr ? offset_of(static_cast<int64_t>(i), red, nr - 1) : 0;
  }
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(count, 1));
  const size_t nk = kept.sizes.size();
  constexpr int64_t kBlock = 64;
  const bool blocked =
      nk > 0 && kept.strides.back() == 1 && kept.sizes.back() >= 8 && inner_stride != 1;
  if (!blocked) {
    parallel_for(0, outputs, grain, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const T* base = px + offset_of(o, kept, nk);
        Acc acc = r.init();
        int64_t idx = 0;
        for (int64_t row : rows) {
          const T* p = base + row;
          for (int64_t k = 0; k < inner; ++k) r.step(acc, static_cast<C>(p[k * inner_stride]), idx++);
        }
        po[o] = r.finish(acc);
      }
    });
    return;
  }
  const int64_t len = kept.sizes.back();
  const int64_t blocks_per_row = (len + kBlock - 1) / kBlock;
  const int64_t tasks = outputs / len * blocks_per_row;
  const int64_t task_grain = std::max<int64_t>(1, grain / kBlock);
  parallel_for(0, tasks, task_grain, [&](int64_t t0, int64_t t1) {
    Acc acc[kBlock];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t q = t / blocks_per_row;
      const int64_t j0 = (t % blocks_per_row) * kBlock;
      const int64_t n = std::min(kBlock, len - j0);
      const T* base = px + offset_of(q, kept, nk - 1) + j0;
      for (int64_t j = 0; j < n; ++j) acc[j] = r.init();
      int64_t idx = 0;
      for (int64_t row : rows) {
        for (int64_t k = 0; k < inner; ++k, ++idx) {
          const T* p = base + row + k * inner_stride;
          for (int64_t j = 0; j < n; ++j) r.step(acc[j], static_cast<C>(p[j]), idx);
        }
      }
      Out* o = po + q * len + j0;
      for (int64_t j = 0; j < n; ++j) o[j] = r.finish(acc[j]);
    }
  });
}

template <template <class, class> class R>
void run_reduce(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_loop<T>(x, out, reduced, R<compute_t<T>, T>{});
  });
}

template <bool kMax>
struct Extremum {
  template <class C, class T>
  using Values = ExtremumReducer<C, T, kMax>;
  template <class C, class T>
  using Index = ArgReducer<C, T, kMax>;
};

nlohmann::json reduce_attrs(const Dims& dims, bool keepdim) {
  return {{"dims", dims}, {"keepdim", keepdim}};
}

DType sum_dtype(DType dt) { return is_floating(dt) ? dt : DType::Int64; }

void require_nonempty(const char* op, const Tensor& x, const ReduceDims& rd, const Loc& loc) {
  for (int64_t d : rd.dims)
    if (x.shape()[d] == 0)
      fail(op, loc, "expected reduced dims of non-zero size, but got dim {} of size 0 in {}", d,
           x.describe());
}

class SumOp final : public Op {
 public:
  SumOp(Dims dims, bool keepdim) : dims_(std::move(dims)), keepdim_(keepdim) {}
  const char* name() const override { return "sum"; }
  nlohmann::json attrs() const override { return reduce_attrs(dims_, keepdim_); }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], dims_, keepdim_, loc);
    return {{rd.out_shape, sum_dtype(in[0].dtype()), in[0].device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], dims_, keepdim_, Loc::current());
    run_reduce<SumReducer>(in[0], out[0], rd.reduced);
  }

  Saves saves() const override { return {false, false}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const TensorMeta& m = ctx.input_metas[0];
    ReduceDims rd = dims_of(m, dims_, keepdim_);
    return {expand(detail::unsqueeze_reduced(ctx.grads[0], rd), m.shape)};
  }

 private:
  Dims dims_;
  bool keepdim_;
};

class ProdOp final : public Op {
 public:
  ProdOp(Dims dims, bool keepdim) : dims_(std::move(dims)), keepdim_(keepdim) {}
  const char* name() const override { return "prod"; }
  nlohmann::json attrs() const override { return reduce_attrs(dims_, keepdim_); }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], dims_, keepdim_, loc);
    return {{rd.out_shape, sum_dtype(in[0].dtype()), in[0].device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], dims_, keepdim_, Loc::current());
    run_reduce<ProdReducer>(in[0], out[0], rd.reduced);
  }

  // Note [prod gradient with zeros]: d prod / d x_i = prod of the others, which y / x_i gives only
  // when no x is zero. With one zero in a group, only that zero gets a gradient (the product of
  // the non-zeros); with two or more, every gradient is zero. Built from where() so that it is
  // itself differentiable.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Tensor& x = ctx.inputs[0];
    ReduceDims rd = dims_of(ctx.input_metas[0], dims_, keepdim_);
    Tensor g = detail::unsqueeze_reduced(ctx.grads[0], rd);
    Tensor zero = eq(x, 0.0);
    Tensor nonzero_x = where(zero, 1.0, x);
    Tensor p = prod(nonzero_x, rd.dims, true);
    Tensor zeros_in_group = sum(zero, rd.dims, true);
    Tensor factor = where(eq(zeros_in_group, 0.0), div(p, nonzero_x),
                          where(logical_and(eq(zeros_in_group, 1.0), zero), p, 0.0));
    return {mul(g, factor)};
  }

 private:
  Dims dims_;
  bool keepdim_;
};

template <bool kMax>
class ExtremumOp final : public Op {
 public:
  ExtremumOp(Dims dims, bool keepdim) : dims_(std::move(dims)), keepdim_(keepdim) {}
  const char* name() const override { return kMax ? "max" : "min"; }
  nlohmann::json attrs() const override { return reduce_attrs(dims_, keepdim_); }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], dims_, keepdim_, loc);
    require_nonempty(name(), in[0], rd, loc);
    return {{rd.out_shape, in[0].dtype(), in[0].device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    ReduceDims rd = detail::normalize_reduce_dims(name(), in[0], dims_, keepdim_, Loc::current());
    run_reduce<Extremum<kMax>::template Values>(in[0], out[0], rd.reduced);
  }

  Saves saves() const override { return {true, true}; }

  // The gradient is shared evenly among tied extrema, like torch.amax.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Tensor& x = ctx.inputs[0];
    ReduceDims rd = dims_of(ctx.input_metas[0], dims_, keepdim_);
    Tensor g = detail::unsqueeze_reduced(ctx.grads[0], rd);
    Tensor y = detail::unsqueeze_reduced(ctx.outputs[0], rd);
    Tensor mask = to_dtype(eq(x, y), x.dtype());
    return {div(mul(g, mask), sum(mask, rd.dims, true))};
  }

 private:
  Dims dims_;
  bool keepdim_;
};

template <bool kMax>
class ArgExtremumOp final : public Op {
 public:
  ArgExtremumOp(std::optional<int64_t> dim, bool keepdim) : dim_(dim), keepdim_(keepdim) {}
  const char* name() const override { return kMax ? "argmax" : "argmin"; }
  nlohmann::json attrs() const override {
    return {{"dim", dim_ ? nlohmann::json(*dim_) : nlohmann::json()}, {"keepdim", keepdim_}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    ReduceDims rd = dims(in[0], loc);
    if (in[0].numel() == 0 && !dim_)
      fail(name(), loc, "expected a non-empty input when no dim is given, but got {}",
           in[0].describe());
    require_nonempty(name(), in[0], rd, loc);
    return {{rd.out_shape, DType::Int64, in[0].device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    ReduceDims rd = dims(in[0], Loc::current());
    run_reduce<Extremum<kMax>::template Index>(in[0], out[0], rd.reduced);
  }

  bool differentiable() const override { return false; }

 private:
  // No dim: the index into the flattened input (keepdim then keeps every dim as 1, like PyTorch).
  ReduceDims dims(const Tensor& x, const Loc& loc) const {
    return detail::normalize_reduce_dims(name(), x, dim_ ? Dims{*dim_} : Dims{}, keepdim_, loc);
  }

  std::optional<int64_t> dim_;
  bool keepdim_;
};

}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  return call_op<SumOp>({x}, loc, dims, keepdim);
}

Tensor prod(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  return call_op<ProdOp>({x}, loc, dims, keepdim);
}

Tensor max(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  return call_op<ExtremumOp<true>>({x}, loc, dims, keepdim);
}

Tensor min(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  return call_op<ExtremumOp<false>>({x}, loc, dims, keepdim);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim, const Loc& loc) {
  return call_op<ArgExtremumOp<true>>({x}, loc, dim, keepdim);
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim, const Loc& loc) {
  return call_op<ArgExtremumOp<false>>({x}, loc, dim, keepdim);
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim, const Loc& loc) {
  if (!is_floating(x.dtype()))
    fail("mean", loc, "expected a floating-point input, but got {}", x.describe());
  ReduceDims rd = detail::normalize_reduce_dims("mean", x, dims, keepdim, loc);
  const double n = static_cast<double>(rd.count);
  // 16-bit floats divide before rounding, as PyTorch does (it accumulates in float32).
  if (itemsize(x.dtype()) == 2)
    return to_dtype(div(sum(to_dtype(x, DType::Float32, loc), dims, keepdim, loc), n, loc),
                    x.dtype(), loc);
  return div(sum(x, dims, keepdim, loc), n, loc);
}

Tensor sum_to(const Tensor& x, const Shape& shape, const Loc& loc) {
  const Shape& xs = x.shape();
  if (xs == shape) return x;
  const size_t rank = xs.size();
  bool ok = shape.size() <= rank;
  const size_t lead = ok ? rank - shape.size() : 0;
  Dims dims;
  for (size_t d = 0; d < rank && ok; ++d) {
    if (d < lead) {
      dims.push_back(static_cast<int64_t>(d));
    } else if (shape[d - lead] != xs[d]) {
      ok = shape[d - lead] == 1;
      dims.push_back(static_cast<int64_t>(d));
    }
  }
  if (!ok)
    fail("sum_to", loc, "expected a shape that broadcasts to the input, but got {} for {}",
         shape_str(shape), x.describe());
  Tensor s = sum(x, dims, true, loc);
  return lead ? reshape(s, shape, loc) : s;
}

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

OpSample sample(std::string label, std::vector<Tensor> in, Fn fn, std::string torch,
                bool check_grad = true) {
  return {std::move(label), std::move(in), std::move(fn), std::move(torch), {}, check_grad};
}

// Samples shared by sum/mean/max/min: same dim sets, torch expressions over `fn_name`.
std::vector<OpSample> dim_samples(Tensor (*f)(const Tensor&, const Dims&, bool, const Loc&),
                                  const std::string& torch_fn) {
  auto call = [f](Dims dims, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{f(in[0], dims, keepdim, Loc::current())};
    };
  };
  const std::string t = "torch." + torch_fn + "(a0";
  return {
      sample("dims_keepdim", {sample_tensor({2, 3, 4}, 11)}, call({0, 2}, true),
             t + ", dim=(0, 2), keepdim=True)"),
      sample("negative_dim", {sample_tensor({2, 3, 4}, 12)}, call({-1}, false), t + ", dim=-1)"),
      sample("all", {sample_tensor({3, 4}, 13)}, call({}, false), t + ")"),
      sample("transposed", {sample_tensor({5, 3}, 14).t()}, call({1}, true),
             t + ", dim=1, keepdim=True)"),
  };
}

KILN_REGISTER_OP_SAMPLES("sum", [] {
  auto v = dim_samples(&sum, "sum");
  v.push_back(sample(
      "zero_dim", {sample_tensor({}, 15)},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0], {0}, true)}; },
      "torch.sum(a0, dim=0, keepdim=True)"));
  return v;
});
KILN_REGISTER_OP_SAMPLES("mean", [] { return dim_samples(&mean, "mean"); });
KILN_REGISTER_OP_SAMPLES("max", [] {
  auto v = dim_samples(&max, "amax");
  // Two equal maxima: the central difference sees half the slope, which is the even share.
  v.push_back(sample(
      "two_ties", {tensor<double>({0.5, 0.9, -0.3, 0.9, 0.1, 0.2}, Shape{2, 3})},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{max(in[0])}; },
      "torch.amax(a0)"));
  return v;
});
KILN_REGISTER_OP_SAMPLES("min", [] { return dim_samples(&min, "amin"); });

KILN_REGISTER_OP_SAMPLES("prod", [] {
  auto call = [](Dims dims, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{prod(in[0], dims, keepdim)};
    };
  };
  // One row without zeros, one with a single zero, one with two.
  Tensor zeros = tensor<double>({0.5, 1.5, -0.8, 0.0, 1.2, 0.7, 0.0, 0.9, 0.0}, Shape{3, 3});
  return std::vector<OpSample>{
      sample("dims_keepdim", {sample_tensor({2, 3, 4}, 21, 0.5, 1.5)}, call({0, 2}, true),
             "torch.prod(torch.prod(a0, dim=2, keepdim=True), dim=0, keepdim=True)"),
      sample("negative_dim", {sample_tensor({2, 3, 4}, 22, -1.5, 1.5)}, call({-2}, false),
             "torch.prod(a0, dim=-2)"),
      sample("all", {sample_tensor({2, 3}, 23, 0.5, 1.5)}, call({}, false), "torch.prod(a0)"),
      sample("zeros", {zeros}, call({1}, false), "torch.prod(a0, dim=1)"),
  };
});

std::vector<OpSample> arg_samples(Tensor (*f)(const Tensor&, std::optional<int64_t>, bool,
                                              const Loc&),
                                  const std::string& name) {
  auto call = [f](std::optional<int64_t> dim, bool keepdim) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{f(in[0], dim, keepdim, Loc::current())};
    };
  };
  const std::string t = "torch." + name + "(a0";
  return {
      sample("dim_keepdim", {sample_tensor({3, 4}, 31)}, call(1, true),
             t + ", dim=1, keepdim=True)", false),
      sample("negative_dim", {sample_tensor({2, 3, 4}, 32)}, call(-2, false), t + ", dim=-2)",
             false),
      sample("flattened", {sample_tensor({3, 4}, 33)}, call(std::nullopt, false), t + ")",
             false),
  };
}

KILN_REGISTER_OP_SAMPLES("argmax", [] { return arg_samples(&argmax, "argmax"); });
KILN_REGISTER_OP_SAMPLES("argmin", [] { return arg_samples(&argmin, "argmin"); });

KILN_REGISTER_OP_SAMPLES("sum_to", [] {
  auto call = [](Shape shape) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{sum_to(in[0], shape)};
    };
  };
  return std::vector<OpSample>{
      sample("leading_and_inner", {sample_tensor({2, 3, 4}, 41)}, call({3, 1}),
             "a0.sum_to_size((3, 1))"),
      sample("keep_rank", {sample_tensor({2, 3, 4}, 42)}, call({1, 3, 1}),
             "a0.sum_to_size((1, 3, 1))"),
      sample("same_shape", {sample_tensor({2, 3}, 43)}, call({2, 3}), "a0.sum_to_size((2, 3))"),
  };
});

}  // namespace

}  // namespace kiln
