// CPU kernels of the indexing family (Note [kernel table]): gather, scatter_add, index_select,
// masked_fill and one_hot. The definitions (attributes, infer, vjp) and the checks of index values
// the kernels run first (Note [index checks]) are in kiln/ops/indexing.cpp.
#include <array>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/indexing_ops.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

// Zero-dim tensors index like [1] ones (torch.gather and friends accept them).
Shape shape_or_one(const Tensor& t) {
  return t.dim() == 0 ? Shape{1} : t.shape();
}
Strides strides_or_one(const Tensor& t) {
  return t.dim() == 0 ? Strides{1} : t.strides();
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

void gather_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& outs) {
  const Tensor &x = in[0], &index = in[1], &out = outs[0];
  const int64_t d = wrap_dim(detail::index_dim_attrs(op).dim, x.dim(), op.name());
  detail::check_index_values(op.name(), index, shape_or_one(x)[d], x, d, kernel_call_site());
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

void scatter_add_kernel(const Op& op, const std::vector<Tensor>& in,
                        const std::vector<Tensor>& outs) {
  const Tensor &x = in[0], &index = in[1], &src = in[2], &out = outs[0];
  const int64_t d = wrap_dim(detail::index_dim_attrs(op).dim, x.dim(), op.name());
  detail::check_index_values(op.name(), index, shape_or_one(x)[d], x, d, kernel_call_site());
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

void index_select_kernel(const Op& op, const std::vector<Tensor>& in,
                         const std::vector<Tensor>& outs) {
  const Tensor &x = in[0], &index = in[1], &out = outs[0];
  const int64_t d = wrap_dim(detail::index_dim_attrs(op).dim, x.dim(), op.name());
  detail::check_index_values(op.name(), index, shape_or_one(x)[d], x, d, kernel_call_site());
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
        for_each_row<2>(
            slice_shape, {os, xs},
            [&](const std::array<int64_t, 2>& off, int64_t len, const std::array<int64_t, 2>& st) {
              for (int64_t i = 0; i < len; ++i) dst[off[0] + i * st[0]] = src[off[1] + i * st[1]];
            });
      }
    });
  });
}

void masked_fill_kernel(const Op& op, const std::vector<Tensor>& in,
                        const std::vector<Tensor>& outs) {
  const double fill = detail::masked_fill_attrs(op).value;
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C value = static_cast<C>(fill);
    map_binary<T, bool, T>(in[0], in[1], outs[0], [value](C x, bool m) { return m ? value : x; });
  });
}

void one_hot_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& outs) {
  const int64_t num_classes = detail::one_hot_attrs(op).num_classes;
  const std::vector<int64_t> labels =
      detail::checked_one_hot_labels(op.name(), in[0], num_classes, kernel_call_site());
  int64_t* po = static_cast<int64_t*>(outs[0].raw_data());
  zero_fill(outs[0]);
  parallel_for(0, static_cast<int64_t>(labels.size()), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i * num_classes + labels[i]] = 1;
  });
}

KILN_REGISTER_KERNEL("gather", DeviceType::CPU, gather_kernel);
KILN_REGISTER_KERNEL("scatter_add", DeviceType::CPU, scatter_add_kernel);
KILN_REGISTER_KERNEL("index_select", DeviceType::CPU, index_select_kernel);
KILN_REGISTER_KERNEL("masked_fill", DeviceType::CPU, masked_fill_kernel);
KILN_REGISTER_KERNEL("one_hot", DeviceType::CPU, one_hot_kernel);

}  // namespace

}  // namespace kiln
