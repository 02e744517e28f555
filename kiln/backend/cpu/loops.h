#pragma once
// Strided loops shared by the CPU kernels: broadcasting, coalescing of dimensions, a contiguous
// fast path the compiler vectorizes, and OpenMP over outer rows. (The layout rule the definitions'
// infer uses, elementwise_format, is in kiln/ops/elementwise_layout.h.)
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/elementwise_layout.h"

namespace kiln {

inline constexpr int64_t kGrain = 32768;

// True when a and out have the same shape and one dense layout (contiguous or channels-last), so
// that their elements pair up at equal offsets from the start.
inline bool same_dense_layout(const Tensor& a, const Tensor& out) {
  if (a.shape() != out.shape()) return false;
  if (a.is_contiguous() && out.is_contiguous()) return true;
  return a.is_channels_last() && out.is_channels_last();
}

// Merges adjacent dims that are contiguous with respect to each other in every operand, so that the
// inner loop is as long as possible. Returns the reduced shape and rewrites the strides.
// StrideList is std::array<Strides, N> or std::vector<Strides> (one Strides per operand).
template <class StrideList>
Shape coalesce(const Shape& shape, StrideList& strides) {
  const size_t n = strides.size();
  Shape out;
  StrideList st = strides;
  for (Strides& s : st) s.clear();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out.empty();
    for (size_t k = 0; k < n && merge; ++k) merge = st[k].back() == strides[k][d] * shape[d];
    if (merge) {
      out.back() *= shape[d];
      for (size_t k = 0; k < n; ++k) st[k].back() = strides[k][d];
    } else {
      out.push_back(shape[d]);
      for (size_t k = 0; k < n; ++k) st[k].push_back(strides[k][d]);
    }
  }
  if (out.empty()) {
    out.push_back(1);
    for (size_t k = 0; k < n; ++k) st[k].push_back(1);
  }
  strides = std::move(st);
  return out;
}

// Visits the dims of `shape` in operand 0's memory order (decreasing strides), so that rows run
// along its unit stride: permutes `shape` and every operand's strides alike.
template <class StrideList>
Shape order_by_first_operand(const Shape& shape, StrideList& strides) {
  if (std::is_sorted(strides[0].rbegin(), strides[0].rend())) return shape;
  std::vector<size_t> perm(shape.size());
  for (size_t d = 0; d < perm.size(); ++d) perm[d] = d;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](size_t x, size_t y) { return strides[0][x] > strides[0][y]; });
  Shape ordered = shape;
  for (size_t d = 0; d < perm.size(); ++d) ordered[d] = shape[perm[d]];
  for (Strides& st : strides) {
    const Strides old = st;
    for (size_t d = 0; d < perm.size(); ++d) st[d] = old[perm[d]];
  }
  return ordered;
}

// Calls inner(offsets, count, inner_strides) for every innermost row of `shape`, where offsets are
// element offsets of the row start in each operand. Rows are split across threads.
// Operand 0 is the output: when its dims are not in decreasing stride order (a channels-last or
// transposed output), the loop visits them in its memory order, so rows run along its unit
// stride.
template <size_t N, class F>
void for_each_row(const Shape& full_shape, std::array<Strides, N> strides, F&& inner) {
  Shape shape = coalesce(order_by_first_operand(full_shape, strides), strides);
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t len = shape.back();
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < rank; ++d) rows *= shape[d];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = strides[k].back();
  int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(len, 1));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      std::array<int64_t, N> off{};
      int64_t rem = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        int64_t i = rem % shape[d];
        rem /= shape[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * strides[k][d];
      }
      inner(off, len, inner_strides);
    }
  });
}

// The same walk for any number of operands, with every row cut into pieces of at most `piece`
// elements, so that one long row (a dense tensor coalesces to one) is still split across threads:
// inner(offsets, count, inner_strides) per piece, offsets in elements per operand.
template <class F>
void for_each_piece(const Shape& full_shape, std::vector<Strides> strides, int64_t piece,
                    F&& inner) {
  const size_t n = strides.size();
  Shape shape = coalesce(order_by_first_operand(full_shape, strides), strides);
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t len = shape.back();
  if (len == 0) return;
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < rank; ++d) rows *= shape[d];
  if (rows == 0) return;
  std::vector<int64_t> inner_strides(n);
  for (size_t k = 0; k < n; ++k) inner_strides[k] = strides[k].back();
  const int64_t per_row = (len + piece - 1) / piece;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::min(len, piece));
  parallel_for(0, rows * per_row, grain, [&](int64_t u0, int64_t u1) {
    std::vector<int64_t> off(n);
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t r = u / per_row, start = (u % per_row) * piece;
      std::fill(off.begin(), off.end(), int64_t{0});
      int64_t rem = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        const int64_t i = rem % shape[d];
        rem /= shape[d];
        for (size_t k = 0; k < n; ++k) off[k] += i * strides[k][d];
      }
      for (size_t k = 0; k < n; ++k) off[k] += start * inner_strides[k];
      inner(off, std::min(piece, len - start), inner_strides);
    }
  });
}

// out[i] = f(a[i]) in compute types (16-bit floats widen to float32).
template <class TA, class TO, class F>
void map_unary(const Tensor& a, const Tensor& out, F f) {
  const TA* pa = static_cast<const TA*>(a.raw_data());
  TO* po = static_cast<TO*>(out.raw_data());
  if (same_dense_layout(a, out)) {
    parallel_for(0, out.numel(), kGrain, [&](int64_t b, int64_t e) {
    // Elements are independent (an output may alias its own input element, never another), so
    // the loop vectorizes; GCC would not without the pragma, fearing aliasing.
#pragma omp simd
      for (int64_t i = b; i < e; ++i) po[i] = static_cast<TO>(f(static_cast<compute_t<TA>>(pa[i])));
    });
    return;
  }
  for_each_row<2>(
      out.shape(), {out.strides(), broadcast_strides(a, out.shape())},
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& s) {
        TO* o = po + off[0];
        const TA* x = pa + off[1];
        for (int64_t i = 0; i < n; ++i)
          o[i * s[0]] = static_cast<TO>(f(static_cast<compute_t<TA>>(x[i * s[1]])));
      });
}

// out[i] = f(a[i], b[i]) with broadcasting of a and b to out's shape.
template <class TA, class TB, class TO, class F>
void map_binary(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const TA* pa = static_cast<const TA*>(a.raw_data());
  const TB* pb = static_cast<const TB*>(b.raw_data());
  TO* po = static_cast<TO*>(out.raw_data());
  if (same_dense_layout(a, out) && same_dense_layout(b, out)) {
    parallel_for(0, out.numel(), kGrain, [&](int64_t s, int64_t e) {
#pragma omp simd
      for (int64_t i = s; i < e; ++i)
        po[i] = static_cast<TO>(
            f(static_cast<compute_t<TA>>(pa[i]), static_cast<compute_t<TB>>(pb[i])));
    });
    return;
  }
  for_each_row<3>(
      out.shape(),
      {out.strides(), broadcast_strides(a, out.shape()), broadcast_strides(b, out.shape())},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& s) {
        TO* o = po + off[0];
        const TA* x = pa + off[1];
        const TB* y = pb + off[2];
        for (int64_t i = 0; i < n; ++i)
          o[i * s[0]] = static_cast<TO>(
              f(static_cast<compute_t<TA>>(x[i * s[1]]), static_cast<compute_t<TB>>(y[i * s[2]])));
      });
}

// The value of a one-element tensor converted to C (without a round trip through double, so int64
// values above 2^53 stay exact).
template <class C>
C scalar_value(const Tensor& t) {
  return visit_dtype(t.dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    return static_cast<C>(static_cast<compute_t<S>>(*static_cast<const S*>(t.raw_data())));
  });
}

// Copies src (any layout, broadcast to dst's shape) into dst, converting the dtype.
void copy_into(const Tensor& dst, const Tensor& src);

// Zeroes a plain tensor's bytes. An empty tensor may have no memory at all (its data pointer is
// null, which memset must not see, even for 0 bytes).
inline void zero_fill(const Tensor& t) {
  if (t.nbytes() > 0) std::memset(t.raw_data(), 0, t.nbytes());
}

}  // namespace kiln
