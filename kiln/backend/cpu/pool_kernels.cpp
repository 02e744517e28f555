// The pooling family's CPU loops (pool_kernels.h).
//
// Note [pooling kernels]: pooling runs on plain loops for every dtype, not on oneDNN: PyTorch's
// results need things oneDNN's pooling does not give. Max pooling must return PyTorch's flat
// per-plane indices (oneDNN keeps an opaque workspace instead), and with ceil_mode PyTorch's
// average divides by a window clipped at the padding, while oneDNN's padding_r would count the
// cells ceil_mode adds. Pooling is memory-bound, so loops over contiguous planes cost about what
// oneDNN would. Threads split whole planes (N * C) and each plane is computed in a fixed order, so
// results never depend on the thread count; backward kernels scatter within their own plane only.
// Max pooling with dilation 1 skips the per-element window arithmetic for the windows that lie
// inside the input (Note [max pooling fast path]), with results identical to the generic loop.
#include "kiln/backend/cpu/pool_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/parallel.h"

namespace kiln {
namespace detail {

namespace {

// A contiguous copy (t itself when already contiguous).
Tensor dense(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty(t.shape(), {t.dtype()});
  copy_into(out, t);
  return out;
}

// Calls f(plane) for every [H, W] plane, planes split across threads.
template <class F>
void for_each_plane(int64_t planes, int64_t work_per_plane, F&& f) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(work_per_plane, 1));
  parallel_for(0, planes, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) f(p);
  });
}

// Runs f(TypeTag<T>) for the floating dtypes (the only ones the pooling ops accept).
template <class F>
void visit_floating(DType dt, F&& f) {
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) f(tag);
  });
}

// One output cell's input window [h0, h1) x [w0, w1) and its divisor (PyTorch's avg_pool2d:
// windows are clipped to input + padding for count_include_pad, to the input otherwise).
struct Window {
  int64_t h0, h1, w0, w1, divisor;
};

Window avg_window(const AvgParams& a, int64_t i, int64_t j, int64_t h, int64_t w) {
  const PoolParams& p = a.p;
  Window win;
  win.h0 = i * p.stride.h - p.padding.h;
  win.w0 = j * p.stride.w - p.padding.w;
  win.h1 = std::min(win.h0 + p.kernel.h, h + p.padding.h);
  win.w1 = std::min(win.w0 + p.kernel.w, w + p.padding.w);
  const int64_t padded = (win.h1 - win.h0) * (win.w1 - win.w0);
  win.h0 = std::max<int64_t>(win.h0, 0);
  win.w0 = std::max<int64_t>(win.w0, 0);
  win.h1 = std::min(win.h1, h);
  win.w1 = std::min(win.w1, w);
  if (a.divisor_override)
    win.divisor = *a.divisor_override;
  else
    win.divisor = a.count_include_pad ? padded : (win.h1 - win.h0) * (win.w1 - win.w0);
  return win;
}

Window adaptive_window(int64_t i, int64_t j, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  Window win{(i * h) / oh, ((i + 1) * h + oh - 1) / oh, (j * w) / ow, ((j + 1) * w + ow - 1) / ow,
             0};
  win.divisor = (win.h1 - win.h0) * (win.w1 - win.w0);
  return win;
}

// Forward of both average poolings: out = window sum / divisor, summed in double.
template <class WindowOf>
void average_forward(const Tensor& x_in, const Tensor& out, WindowOf window_of) {
  const Tensor x = dense(x_in);
  const int64_t h = x.dim_size(-2), w = x.dim_size(-1), oh = out.dim_size(-2),
                ow = out.dim_size(-1);
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(out.raw_data());
    for_each_plane(x.numel() / (h * w), h * w, [&](int64_t plane) {
      const T* xp = px + plane * h * w;
      T* yp = py + plane * oh * ow;
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const Window win = window_of(i, j, h, w, oh, ow);
          double s = 0.0;
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) s += static_cast<double>(xp[ih * w + iw]);
          const bool empty = win.h0 >= win.h1 || win.w0 >= win.w1;
          yp[i * ow + j] = static_cast<T>(empty ? 0.0 : s / static_cast<double>(win.divisor));
        }
      }
    });
  });
}

// Backward of both: every input cell of a window gets grad / divisor, in output order per plane.
template <class WindowOf>
void average_backward(const Tensor& grad_in, const Tensor& out, WindowOf window_of) {
  const Tensor grad = dense(grad_in);
  const int64_t h = out.dim_size(-2), w = out.dim_size(-1), oh = grad.dim_size(-2),
                ow = grad.dim_size(-1);
  visit_floating(grad.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = static_cast<const T*>(grad.raw_data());
    T* px = static_cast<T*>(out.raw_data());
    for_each_plane(out.numel() / (h * w), h * w, [&](int64_t plane) {
      std::vector<double> acc(static_cast<size_t>(h * w), 0.0);
      const T* gp = pg + plane * oh * ow;
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const Window win = window_of(i, j, h, w, oh, ow);
          if (win.h0 >= win.h1 || win.w0 >= win.w1) continue;  // no input cell (divisor may be 0)
          const double v = static_cast<double>(gp[i * ow + j]) / static_cast<double>(win.divisor);
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) acc[ih * w + iw] += v;
        }
      }
      T* xp = px + plane * h * w;
      for (int64_t k = 0; k < h * w; ++k) xp[k] = static_cast<T>(acc[k]);
    });
  });
}

// Note [max pooling fast path]: the generic kernel (max_cell) walks every window with clipping
// and dilation arithmetic per cell and a data-dependent branch per element, about 10 ns per
// output. With dilation 1, the outputs whose windows lie inside the input (all but a border at
// most a few cells wide) need none of that: their windows are fixed offsets from a row pointer.
// Those interior runs go through max_row_fixed (kernel 2x2 and 3x3 with column stride 2,
// unrolled at compile time and vectorized across outputs by `omp simd`) or max_row_any (other
// sizes); the border keeps max_cell. Both compute every output with the same scan as max_cell:
// the same elements in the same row-major order under the same update rule, so values and
// indices match bit for bit. Vectorizing across outputs does not reorder any output's scan.
// Starting a scan from the window's first element instead of -inf with index of the first cell
// is the same: that element replaces -inf unless it is -inf itself, and then the running max
// is -inf at the first cell either way.

// PyTorch's update rule: ties keep the earlier element, a NaN replaces anything (so the last
// NaN of a window wins), and nothing replaces a NaN but another NaN.
template <class C>
inline bool replaces(C v, C m) {
  return v > m || std::isnan(v);
}

// One step of a scan, branch-free so that it vectorizes.
template <class C>
inline void scan_step(C v, int64_t offset, C& m, int64_t& best) {
  const bool take = replaces(v, m);
  m = take ? v : m;
  best = take ? offset : best;
}

// The generic kernel for output cell (i, j) of one plane: any dilation, windows clipped to the
// input (padding never wins).
template <class T>
void max_cell(const PoolParams& p, const T* xp, int64_t h, int64_t w, int64_t i, int64_t j, T* y,
              int64_t* index) {
  using C = compute_t<T>;
  int64_t h0 = i * p.stride.h - p.padding.h;
  const int64_t h1 = std::min(h0 + (p.kernel.h - 1) * p.dilation.h + 1, h);
  while (h0 < 0) h0 += p.dilation.h;
  int64_t w0 = j * p.stride.w - p.padding.w;
  const int64_t w1 = std::min(w0 + (p.kernel.w - 1) * p.dilation.w + 1, w);
  while (w0 < 0) w0 += p.dilation.w;
  int64_t best = h0 * w + w0;
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t ih = h0; ih < h1; ih += p.dilation.h) {
    for (int64_t iw = w0; iw < w1; iw += p.dilation.w) {
      const C v = static_cast<C>(xp[ih * w + iw]);
      if (replaces(v, m)) {
        m = v;
        best = ih * w + iw;
      }
    }
  }
  *y = static_cast<T>(m);
  *index = best;
}

// Element k of a row-major window with KW columns, in a plane of width w.
template <int KW>
constexpr int64_t window_offset(size_t k, int64_t w) {
  return static_cast<int64_t>(k / KW) * w + static_cast<int64_t>(k % KW);
}

// Scans elements 1 .. KH*KW-1 of the window at s, in row-major order (element 0 seeded the scan).
template <int KH, int KW, class T, class C, size_t... K>
inline void scan_fixed(const T* s, int64_t w, C& m, int64_t& best, std::index_sequence<K...>) {
  (scan_step(static_cast<C>(s[window_offset<KW>(K + 1, w)]), window_offset<KW>(K + 1, w), m, best),
   ...);
}

// VW consecutive outputs whose windows start at src, src + SW, ...; `base` is src's flat index.
template <int KH, int KW, int SW, int VW, class T>
inline void max_block(const T* src, int64_t w, int64_t base, T* __restrict y,
                      int64_t* __restrict index) {
  using C = compute_t<T>;
#pragma omp simd
  for (int k = 0; k < VW; ++k) {
    const T* s = src + k * SW;
    C m = static_cast<C>(s[0]);
    int64_t best = 0;
    scan_fixed<KH, KW>(s, w, m, best, std::make_index_sequence<KH * KW - 1>{});
    y[k] = static_cast<T>(m);
    index[k] = base + k * SW + best;
  }
}

// n interior outputs of one row with a KH x KW kernel and column stride SW: whole vector blocks,
// the last one overlapping the previous (recomputing outputs gives the same bits) so that no
// scalar remainder is left. A row shorter than a block computes a whole block when its extra
// windows still lie inside the input buffer (they read the next row's elements): straight into
// y when the plane has `room` outputs from y on (the extra outputs land on cells of this plane
// computed later, which overwrite them), else into a buffer. Otherwise it runs the same scan one
// output at a time.
template <int KH, int KW, int SW, class T>
void max_row_fixed(const T* src, const T* end, int64_t w, int64_t n, int64_t base, T* y,
                   int64_t* index, int64_t room) {
  constexpr int VW = 32 / sizeof(compute_t<T>);  // one AVX2 register
  if (n >= VW) {
    for (int64_t j = 0;; j += VW) {
      const int64_t jb = std::min(j, n - VW);
      max_block<KH, KW, SW, VW>(src + jb * SW, w, base + jb * SW, y + jb, index + jb);
      if (jb == n - VW) return;
    }
  }
  if (end - src >= (VW - 1) * SW + (KH - 1) * w + KW) {
    if (room >= VW) {
      max_block<KH, KW, SW, VW>(src, w, base, y, index);
      return;
    }
    T yb[VW];
    int64_t ib[VW];
    max_block<KH, KW, SW, VW>(src, w, base, yb, ib);
    std::copy_n(yb, n, y);
    std::copy_n(ib, n, index);
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    max_block<KH, KW, SW, 1>(src + j * SW, w, base + j * SW, y + j, index + j);
}

// The same for any kernel size and column stride.
template <class T>
void max_row_any(const PoolParams& p, const T* src, int64_t w, int64_t n, int64_t base, T* y,
                 int64_t* index) {
  using C = compute_t<T>;
  for (int64_t j = 0; j < n; ++j) {
    const T* s = src + j * p.stride.w;
    C m = -std::numeric_limits<C>::infinity();
    int64_t best = 0;
    for (int64_t r = 0; r < p.kernel.h; ++r)
      for (int64_t c = 0; c < p.kernel.w; ++c)
        scan_step(static_cast<C>(s[r * w + c]), r * w + c, m, best);
    y[j] = static_cast<T>(m);
    index[j] = base + j * p.stride.w + best;
  }
}

// Outputs [begin, end) of one dim whose windows (dilation 1) lie inside [0, in).
struct Span {
  int64_t begin, end;
};

Span interior(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t out) {
  const int64_t begin = (pad + stride - 1) / stride;
  const int64_t end = in + pad - k < 0 ? 0 : std::min(out, (in + pad - k) / stride + 1);
  return {begin, std::max(begin, end)};
}

// One plane of a dilation-1 max pooling: row(src, n, base, y, index, room) computes n interior
// outputs of a row (the plane's outputs from y on number `room`), max_cell the border, in
// row-major order.
template <class T, class Row>
void max_plane_dilation1(const PoolParams& p, const T* xp, int64_t h, int64_t w, int64_t oh,
                         int64_t ow, T* yp, int64_t* ip, Row row) {
  const Span rows = interior(h, p.kernel.h, p.stride.h, p.padding.h, oh);
  const Span cols = interior(w, p.kernel.w, p.stride.w, p.padding.w, ow);
  for (int64_t i = 0; i < oh; ++i) {
    T* y = yp + i * ow;
    int64_t* index = ip + i * ow;
    const bool inside = i >= rows.begin && i < rows.end;
    const int64_t j0 = inside ? cols.begin : ow, j1 = inside ? cols.end : ow;
    for (int64_t j = 0; j < j0; ++j) max_cell(p, xp, h, w, i, j, y + j, index + j);
    if (j0 < j1) {
      const int64_t first = (i * p.stride.h - p.padding.h) * w + j0 * p.stride.w - p.padding.w;
      row(xp + first, j1 - j0, first, y + j0, index + j0, oh * ow - (i * ow + j0));
    }
    for (int64_t j = j1; j < ow; ++j) max_cell(p, xp, h, w, i, j, y + j, index + j);
  }
}

}  // namespace

// Note [channels-last max pooling]: a channels-last input (a convolution's NHWC output, an
// int8 convolution's always) is pooled where it lies: each output position takes the maximum of
// its window's C-vectors, vectorized across channels, instead of first copying the whole input
// to planes. The outputs stay contiguous (NCHW), as infer says for every input: a graph traced
// with a symbolic batch cannot know which inputs will be channels-last (Note [channels-last]),
// so an output layout that followed the input's would break the views traced after it. Every
// channel's scan is max_cell's (the same window, clipped the same way, the same elements in the
// same row-major order under the same update rule), so values and indices (flat within the
// [H, W] plane) match the planar kernel bit for bit.
template <class T>
void max_pool_channels_last(const PoolParams& p, const T* px, T* py, int64_t* pi, int64_t n,
                            int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  using C = compute_t<T>;
  const int64_t rows = n * oh;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(ow * c, 1));
  // One output row (all ow positions, all channels) is scanned into [ow, C] buffers, then
  // written out channel by channel as contiguous runs of the NCHW outputs.
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<C> m(static_cast<size_t>(ow * c));
    std::vector<int64_t> best(static_cast<size_t>(ow * c));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / oh, i = r % oh;
      int64_t h0 = i * p.stride.h - p.padding.h;
      const int64_t h1 = std::min(h0 + (p.kernel.h - 1) * p.dilation.h + 1, h);
      while (h0 < 0) h0 += p.dilation.h;
      for (int64_t j = 0; j < ow; ++j) {
        int64_t w0 = j * p.stride.w - p.padding.w;
        const int64_t w1 = std::min(w0 + (p.kernel.w - 1) * p.dilation.w + 1, w);
        while (w0 < 0) w0 += p.dilation.w;
        C* __restrict mp = m.data() + j * c;
        int64_t* __restrict bp = best.data() + j * c;
        const int64_t first = h0 * w + w0;
#pragma omp simd
        for (int64_t k = 0; k < c; ++k) {
          mp[k] = -std::numeric_limits<C>::infinity();
          bp[k] = first;
        }
        for (int64_t ih = h0; ih < h1; ih += p.dilation.h)
          for (int64_t iw = w0; iw < w1; iw += p.dilation.w) {
            const T* src = px + ((b * h + ih) * w + iw) * c;
            const int64_t offset = ih * w + iw;
#pragma omp simd
            for (int64_t k = 0; k < c; ++k) scan_step(static_cast<C>(src[k]), offset, mp[k], bp[k]);
          }
      }
      // Row i of plane (b, k) of the NCHW outputs.
      for (int64_t k = 0; k < c; ++k) {
        T* y = py + ((b * c + k) * oh + i) * ow;
        int64_t* index = pi + ((b * c + k) * oh + i) * ow;
        for (int64_t j = 0; j < ow; ++j) {
          y[j] = static_cast<T>(m[static_cast<size_t>(j * c + k)]);
          index[j] = best[static_cast<size_t>(j * c + k)];
        }
      }
    }
  });
}

void max_pool_kernel(const PoolParams& p, const Tensor& x_in, const Tensor& values,
                     const Tensor& indices) {
  if (x_in.dim() == 4 && x_in.is_channels_last() && !x_in.is_contiguous() &&
      values.is_contiguous() && indices.is_contiguous()) {
    const Tensor& x = x_in;
    visit_floating(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      max_pool_channels_last(
          p, static_cast<const T*>(x.raw_data()), static_cast<T*>(values.raw_data()),
          static_cast<int64_t*>(indices.raw_data()), x.dim_size(0), x.dim_size(1), x.dim_size(2),
          x.dim_size(3), values.dim_size(2), values.dim_size(3));
    });
    return;
  }
  const Tensor x = dense(x_in);
  const int64_t h = x.dim_size(-2), w = x.dim_size(-1), oh = values.dim_size(-2),
                ow = values.dim_size(-1);
  int64_t* pi = static_cast<int64_t*>(indices.raw_data());
  const bool dilation1 = p.dilation.h == 1 && p.dilation.w == 1;
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* end = px + x.numel();
    T* py = static_cast<T*>(values.raw_data());
    for_each_plane(x.numel() / (h * w), oh * ow * p.kernel.h * p.kernel.w, [&](int64_t plane) {
      const T* xp = px + plane * h * w;
      T* yp = py + plane * oh * ow;
      int64_t* ip = pi + plane * oh * ow;
      // Note [max pooling fast path].
      auto plane_dilation1 = [&](auto row) {
        max_plane_dilation1(p, xp, h, w, oh, ow, yp, ip, row);
      };
      const bool stride_w2 = p.stride.w == 2;
      if (dilation1 && p.kernel.h == 2 && p.kernel.w == 2 && stride_w2) {
        plane_dilation1(
            [&](const T* src, int64_t n, int64_t base, T* y, int64_t* index, int64_t room) {
              max_row_fixed<2, 2, 2>(src, end, w, n, base, y, index, room);
            });
      } else if (dilation1 && p.kernel.h == 3 && p.kernel.w == 3 && stride_w2) {
        plane_dilation1(
            [&](const T* src, int64_t n, int64_t base, T* y, int64_t* index, int64_t room) {
              max_row_fixed<3, 3, 2>(src, end, w, n, base, y, index, room);
            });
      } else if (dilation1) {
        plane_dilation1([&](const T* src, int64_t n, int64_t base, T* y, int64_t* index, int64_t) {
          max_row_any(p, src, w, n, base, y, index);
        });
      } else {
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j)
            max_cell(p, xp, h, w, i, j, yp + i * ow + j, ip + i * ow + j);
      }
    });
  });
}

// Index checks run in parallel, each chunk stopping at its first bad index: the smallest of
// those is the first bad index overall whatever the chunks are. Nothing throws inside the
// parallel region (Note [index checks] in indexing.cpp); the op reports the position.
int64_t max_pool_backward_kernel(const Tensor& grad_in, const Tensor& indices_in,
                                 const Tensor& out) {
  const Tensor grad = dense(grad_in), indices = dense(indices_in);
  const int64_t plane_in = out.dim_size(-2) * out.dim_size(-1);
  const int64_t plane_out = grad.dim_size(-2) * grad.dim_size(-1);
  const int64_t count = indices.numel();
  const int64_t* pi = static_cast<const int64_t*>(indices.raw_data());
  std::atomic<int64_t> first_bad{count};
  parallel_for(0, count, kGrain, [&](int64_t k0, int64_t k1) {
    constexpr int64_t kBlock = 256;
    const auto bound = static_cast<uint64_t>(plane_in);  // negative indices wrap above it
    for (int64_t b = k0; b < k1 && b < first_bad.load(std::memory_order_relaxed); b += kBlock) {
      const int64_t e = std::min(b + kBlock, k1);
      int bad = 0;
#pragma omp simd reduction(| : bad)
      for (int64_t k = b; k < e; ++k) bad |= static_cast<uint64_t>(pi[k]) >= bound ? 1 : 0;
      if (!bad) continue;
      int64_t k = b;
      while (static_cast<uint64_t>(pi[k]) < bound) ++k;
      int64_t seen = first_bad.load();
      while (k < seen && !first_bad.compare_exchange_weak(seen, k)) {
      }
      return;
    }
  });
  if (first_bad.load() < count) return first_bad.load();
  if (count == 0) {
    zero_fill(out);
    return -1;
  }
  visit_floating(grad.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* pg = static_cast<const T*>(grad.raw_data());
    T* px = static_cast<T*>(out.raw_data());
    // Each plane is zeroed and then scattered into in output order while it is in cache.
    for_each_plane(count / plane_out, plane_in + plane_out, [&](int64_t plane) {
      T* xp = px + plane * plane_in;
      std::memset(static_cast<void*>(xp), 0, static_cast<size_t>(plane_in) * sizeof(T));
      const T* gp = pg + plane * plane_out;
      const int64_t* ip = pi + plane * plane_out;
      for (int64_t k = 0; k < plane_out; ++k)
        xp[ip[k]] = static_cast<T>(static_cast<C>(xp[ip[k]]) + static_cast<C>(gp[k]));
    });
  });
  return -1;
}

void avg_pool_kernel(const AvgParams& a, const Tensor& x, const Tensor& out) {
  average_forward(x, out, [&](int64_t i, int64_t j, int64_t h, int64_t w, int64_t, int64_t) {
    return avg_window(a, i, j, h, w);
  });
}

void avg_pool_backward_kernel(const AvgParams& a, const Tensor& grad, const Tensor& out) {
  average_backward(grad, out, [&](int64_t i, int64_t j, int64_t h, int64_t w, int64_t, int64_t) {
    return avg_window(a, i, j, h, w);
  });
}

void adaptive_avg_pool_kernel(const Tensor& x, const Tensor& out) {
  average_forward(x, out, adaptive_window);
}

void adaptive_avg_pool_backward_kernel(const Tensor& grad, const Tensor& out) {
  average_backward(grad, out, adaptive_window);
}

}  // namespace detail
}  // namespace kiln
