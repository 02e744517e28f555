// The strided reduction loop behind the primitive reductions (their ops: kiln/ops/reduce.cpp;
// their kernel-table entries: reduce_ops.cpp here): one loop (reduce_loop) parameterized by a
// small reducer struct per op.
#include "kiln/backend/cpu/reduce_kernels.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/parallel.h"

namespace kiln {
namespace detail {

namespace {

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
void reduce_loop(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced, const R& r) {
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
          for (int64_t k = 0; k < inner; ++k)
            r.step(acc, static_cast<C>(p[k * inner_stride]), idx++);
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

}  // namespace

void sum_kernel(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced) {
  run_reduce<SumReducer>(x, out, reduced);
}

void prod_kernel(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced) {
  run_reduce<ProdReducer>(x, out, reduced);
}

void extremum_kernel(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced,
                     bool is_max) {
  if (is_max)
    run_reduce<Extremum<true>::Values>(x, out, reduced);
  else
    run_reduce<Extremum<false>::Values>(x, out, reduced);
}

void arg_extremum_kernel(const Tensor& x, const Tensor& out, const std::vector<bool>& reduced,
                         bool is_max) {
  if (is_max)
    run_reduce<Extremum<true>::Index>(x, out, reduced);
  else
    run_reduce<Extremum<false>::Index>(x, out, reduced);
}

}  // namespace detail
}  // namespace kiln
