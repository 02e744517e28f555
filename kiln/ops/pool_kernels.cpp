// The pooling kernels and the checks the pooling ops share.
//
// Note [pooling kernels]: pooling runs on plain loops for every dtype, not on oneDNN: PyTorch's
// results need things oneDNN's pooling does not give. Max pooling must return PyTorch's flat
// per-plane indices (oneDNN keeps an opaque workspace instead), and with ceil_mode PyTorch's
// average divides by a window clipped at the padding, while oneDNN's padding_r would count the
// cells ceil_mode adds. Pooling is memory-bound, so loops over contiguous planes cost about what
// oneDNN would. Threads split whole planes (N * C) and each plane is computed in a fixed order, so
// results never depend on the thread count; backward kernels scatter within their own plane only.
#include "kiln/ops/pool_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/core/parallel.h"
#include "kiln/ops/loops.h"

namespace kiln {
namespace detail {

namespace {

// PyTorch's pooling_output_shape: floor or ceil division, and with ceil_mode the last window
// must start inside the input or the left padding.
int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                      bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

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
  const int64_t h = x.size(-2), w = x.size(-1), oh = out.size(-2), ow = out.size(-1);
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
  const int64_t h = out.size(-2), w = out.size(-1), oh = grad.size(-2), ow = grad.size(-1);
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

}  // namespace

PoolParams max_params(Size2 kernel, const MaxPool2dOptions& o) {
  return {kernel, o.stride.value_or(kernel), o.padding, o.dilation, o.ceil_mode};
}

AvgParams avg_params(Size2 kernel, const AvgPool2dOptions& o) {
  return {{kernel, o.stride.value_or(kernel), o.padding, 1, o.ceil_mode},
          o.count_include_pad,
          o.divisor_override};
}

AvgPool2dOptions avg_options(const AvgParams& a) {
  return {a.p.stride, a.p.padding, a.p.ceil_mode, a.count_include_pad, a.divisor_override};
}

nlohmann::json pair_json(Size2 s) {
  return {s.h, s.w};
}

nlohmann::json max_json(const PoolParams& p) {
  return {{"kernel_size", pair_json(p.kernel)},
          {"stride", pair_json(p.stride)},
          {"padding", pair_json(p.padding)},
          {"dilation", pair_json(p.dilation)},
          {"ceil_mode", p.ceil_mode}};
}

// A tensor's [N, C, H, W] or [C, H, W]: rank, floating dtype, non-empty C, H, W.
void check_pool_input(const char* op, const char* what, const Tensor& x, const Loc& loc) {
  if (x.dim() != 3 && x.dim() != 4)
    fail(op, loc, "expected {} of rank 3 (C,H,W) or 4 (N,C,H,W), but got {}", what, x.describe());
  if (!is_floating(x.dtype()))
    fail(op, loc, "expected a floating-point {}, but got {}", what, x.describe());
  if (x.size(-1) == 0 || x.size(-2) == 0 || x.size(-3) == 0)
    fail(op, loc, "expected {} with non-empty C, H and W dims, but got {}", what, x.describe());
}

// Checks the parameters for an input of spatial size (h, w) and returns the output size.
Size2 check_pool_params(const char* op, const PoolParams& p, int64_t h, int64_t w,
                        const std::string& operand, const Loc& loc) {
  const Size2 sizes[] = {p.kernel, p.stride, p.dilation};
  const char* names[] = {"kernel_size", "stride", "dilation"};
  for (int i = 0; i < 3; ++i)
    if (sizes[i].h <= 0 || sizes[i].w <= 0)
      fail(op, loc, "expected a positive {}, but got [{}, {}]", names[i], sizes[i].h, sizes[i].w);
  if (p.padding.h < 0 || p.padding.w < 0 || p.padding.h > p.kernel.h / 2 ||
      p.padding.w > p.kernel.w / 2)
    fail(op, loc,
         "expected padding between 0 and half the kernel size, but got padding [{}, {}] for "
         "kernel_size [{}, {}]",
         p.padding.h, p.padding.w, p.kernel.h, p.kernel.w);
  const int64_t oh =
      pool_out_size(h, p.kernel.h, p.padding.h, p.stride.h, p.dilation.h, p.ceil_mode);
  const int64_t ow =
      pool_out_size(w, p.kernel.w, p.padding.w, p.stride.w, p.dilation.w, p.ceil_mode);
  if (oh <= 0 || ow <= 0)
    fail(op, loc,
         "expected an output of at least 1x1, but got {}x{} for {} (kernel_size [{}, {}], stride "
         "[{}, {}], padding [{}, {}], dilation [{}, {}])",
         oh, ow, operand, p.kernel.h, p.kernel.w, p.stride.h, p.stride.w, p.padding.h, p.padding.w,
         p.dilation.h, p.dilation.w);
  return {oh, ow};
}

// `like`'s shape with the last two dims replaced.
Shape with_spatial(const Shape& like, int64_t h, int64_t w) {
  Shape s = like;
  s[s.size() - 2] = h;
  s[s.size() - 1] = w;
  return s;
}

void check_grad_spatial(const char* op, const Tensor& grad, Size2 want, const Loc& loc) {
  if (grad.size(-2) != want.h || grad.size(-1) != want.w)
    fail(op, loc, "expected grad of spatial size {}x{} (the pooling output), but got {}", want.h,
         want.w, grad.describe());
}

void check_input_size(const char* op, Size2 size, const Loc& loc) {
  if (size.h <= 0 || size.w <= 0)
    fail(op, loc, "expected a positive input_size, but got [{}, {}]", size.h, size.w);
}

nlohmann::json avg_json(const AvgParams& a) {
  nlohmann::json j = max_json(a.p);
  j.erase("dilation");
  j["count_include_pad"] = a.count_include_pad;
  j["divisor_override"] = a.divisor_override ? nlohmann::json(*a.divisor_override) : nullptr;
  return j;
}

void check_avg_params(const char* op, const AvgParams& a, const Loc& loc) {
  if (a.divisor_override && *a.divisor_override == 0)
    fail(op, loc, "expected a non-zero divisor_override, but got 0");
}

void max_pool_kernel(const PoolParams& p, const Tensor& x_in, const Tensor& values,
                     const Tensor& indices) {
  const Tensor x = dense(x_in);
  const int64_t h = x.size(-2), w = x.size(-1), oh = values.size(-2), ow = values.size(-1);
  int64_t* pi = static_cast<int64_t*>(indices.raw_data());
  visit_floating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(values.raw_data());
    for_each_plane(x.numel() / (h * w), oh * ow * p.kernel.h * p.kernel.w, [&](int64_t plane) {
      const T* xp = px + plane * h * w;
      for (int64_t i = 0; i < oh; ++i) {
        int64_t h0 = i * p.stride.h - p.padding.h;
        const int64_t h1 = std::min(h0 + (p.kernel.h - 1) * p.dilation.h + 1, h);
        while (h0 < 0) h0 += p.dilation.h;
        for (int64_t j = 0; j < ow; ++j) {
          int64_t w0 = j * p.stride.w - p.padding.w;
          const int64_t w1 = std::min(w0 + (p.kernel.w - 1) * p.dilation.w + 1, w);
          while (w0 < 0) w0 += p.dilation.w;
          int64_t best = h0 * w + w0;
          C m = -std::numeric_limits<C>::infinity();
          for (int64_t ih = h0; ih < h1; ih += p.dilation.h) {
            for (int64_t iw = w0; iw < w1; iw += p.dilation.w) {
              const C v = static_cast<C>(xp[ih * w + iw]);
              if (v > m || std::isnan(v)) {
                m = v;
                best = ih * w + iw;
              }
            }
          }
          const int64_t o = (plane * oh + i) * ow + j;
          py[o] = static_cast<T>(m);
          pi[o] = best;
        }
      }
    });
  });
}

int64_t max_pool_backward_kernel(const Tensor& grad_in, const Tensor& indices_in,
                                 const Tensor& out) {
  const Tensor grad = dense(grad_in), indices = dense(indices_in);
  const int64_t plane_in = out.size(-2) * out.size(-1);
  const int64_t plane_out = grad.size(-2) * grad.size(-1);
  const int64_t* pi = static_cast<const int64_t*>(indices.raw_data());
  for (int64_t k = 0; k < indices.numel(); ++k)
    if (pi[k] < 0 || pi[k] >= plane_in) return k;
  std::memset(out.raw_data(), 0, out.nbytes());
  if (plane_out == 0) return -1;
  visit_floating(grad.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* pg = static_cast<const T*>(grad.raw_data());
    T* px = static_cast<T*>(out.raw_data());
    for_each_plane(grad.numel() / plane_out, plane_out, [&](int64_t plane) {
      T* xp = px + plane * plane_in;
      for (int64_t k = plane * plane_out; k < (plane + 1) * plane_out; ++k)
        xp[pi[k]] = static_cast<T>(static_cast<C>(xp[pi[k]]) + static_cast<C>(pg[k]));
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
