// CPU kernels of interpolate and interpolate_backward (Note [kernel table]). Both are separable:
// per-dim tap tables (two source indices and weights per output index, Note [resize coordinate
// modes] in kiln/ops/interpolate.h) drive one loop per direction. The definitions (option
// validation, attributes, infer, vjp) are in kiln/ops/interpolate.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/interpolate_ops.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

using detail::Resize;

// For each output index: out = w0 * in[i0] + w1 * in[i1] (nearest: w0 = 1, i1 = i0, w1 = 0).
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<double> w0, w1;
};

Taps make_taps(int64_t in, int64_t out, std::optional<double> factor, const Resize& r) {
  Taps t;
  t.i0.resize(out);
  t.i1.resize(out);
  t.w0.assign(out, 1.0);
  t.w1.assign(out, 0.0);
  const std::string& c = r.coordinate_mode;
  if (!r.bilinear) {
    // PyTorch's float32 arithmetic (UpSample.h), so that ties resolve to the same index.
    const float scale = factor ? static_cast<float>(1.0 / *factor)
                               : static_cast<float>(in) / static_cast<float>(out);
    for (int64_t o = 0; o < out; ++o) {
      int64_t s;
      if (c == "half_pixel")
        s = static_cast<int64_t>(std::floor(static_cast<float>((o + 0.5) * scale)));
      else if (out == in)
        s = o;
      else if (out == 2 * in)
        s = o >> 1;
      else
        s = static_cast<int64_t>(std::floor(static_cast<float>(o) * scale));
      t.i0[o] = t.i1[o] = std::min(s, in - 1);
    }
    return t;
  }
  // PyTorch copies when the sizes match, whatever the scale factor; ONNX's modes do not.
  const bool torch_mode = c == "align_corners" || c == "align_corners_false";
  const double scale =
      c == "align_corners"
          ? (out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
      : factor ? 1.0 / *factor
               : static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    if (torch_mode && out == in) {
      t.i0[o] = t.i1[o] = o;
      continue;
    }
    double src;
    if (c == "align_corners" || c == "asymmetric")
      src = scale * static_cast<double>(o);
    else if (c == "pytorch_half_pixel" && out == 1)
      src = 0.0;
    else
      src = scale * (static_cast<double>(o) + 0.5) - 0.5;
    src = std::max(src, 0.0);
    const int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
    t.i0[o] = i0;
    t.i1[o] = std::min(i0 + 1, in - 1);
    t.w1[o] = src - static_cast<double>(i0);
    t.w0[o] = 1.0 - t.w1[o];
  }
  return t;
}

template <class T>
void resize_kernel(const Tensor& x, const Tensor& out, const Taps& th, const Taps& tw,
                   bool bilinear) {
  using C = compute_t<T>;
  const int64_t planes = x.dim_size(0) * x.dim_size(1), ih = x.dim_size(2), iw = x.dim_size(3);
  const int64_t oh = out.dim_size(2), ow = out.dim_size(3);
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  parallel_for(0, planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(oh * ow, 1)),
               [&](int64_t p0, int64_t p1) {
                 for (int64_t p = p0; p < p1; ++p) {
                   const T* src = px + p * ih * iw;
                   T* dst = po + p * oh * ow;
                   for (int64_t h = 0; h < oh; ++h) {
                     const T* r0 = src + th.i0[h] * iw;
                     const T* r1 = src + th.i1[h] * iw;
                     T* d = dst + h * ow;
                     if (!bilinear) {
                       for (int64_t w = 0; w < ow; ++w) d[w] = r0[tw.i0[w]];
                       continue;
                     }
                     const C a0 = static_cast<C>(th.w0[h]), a1 = static_cast<C>(th.w1[h]);
                     for (int64_t w = 0; w < ow; ++w) {
                       const C b0 = static_cast<C>(tw.w0[w]), b1 = static_cast<C>(tw.w1[w]);
                       const int64_t j0 = tw.i0[w], j1 = tw.i1[w];
                       d[w] = static_cast<T>(
                           a0 * (b0 * static_cast<C>(r0[j0]) + b1 * static_cast<C>(r0[j1])) +
                           a1 * (b0 * static_cast<C>(r1[j0]) + b1 * static_cast<C>(r1[j1])));
                     }
                   }
                 }
               });
}

// Planes go to threads; within a plane the outputs scatter in row-major order into a double
// buffer, so every sum has a fixed order whatever the thread count.
template <class T>
void resize_backward_kernel(const Tensor& g, const Tensor& gx, const Taps& th, const Taps& tw) {
  const int64_t planes = gx.dim_size(0) * gx.dim_size(1), ih = gx.dim_size(2), iw = gx.dim_size(3);
  const int64_t oh = g.dim_size(2), ow = g.dim_size(3);
  const T* pg = static_cast<const T*>(g.raw_data());
  T* po = static_cast<T*>(gx.raw_data());
  parallel_for(0, planes, std::max<int64_t>(1, kGrain / std::max<int64_t>(oh * ow, 1)),
               [&](int64_t p0, int64_t p1) {
                 std::vector<double> acc(static_cast<size_t>(ih * iw));
                 for (int64_t p = p0; p < p1; ++p) {
                   std::fill(acc.begin(), acc.end(), 0.0);
                   const T* src = pg + p * oh * ow;
                   for (int64_t h = 0; h < oh; ++h)
                     for (int64_t w = 0; w < ow; ++w) {
                       const double v = static_cast<double>(src[h * ow + w]);
                       const int64_t a = th.i0[h] * iw, b = th.i1[h] * iw;
                       acc[a + tw.i0[w]] += th.w0[h] * tw.w0[w] * v;
                       if (th.w1[h] != 0.0 || tw.w1[w] != 0.0) {
                         acc[a + tw.i1[w]] += th.w0[h] * tw.w1[w] * v;
                         acc[b + tw.i0[w]] += th.w1[h] * tw.w0[w] * v;
                         acc[b + tw.i1[w]] += th.w1[h] * tw.w1[w] * v;
                       }
                     }
                   T* dst = po + p * ih * iw;
                   for (int64_t i = 0; i < ih * iw; ++i)
                     dst[i] = static_cast<T>(static_cast<compute_t<T>>(acc[i]));
                 }
               });
}

void interpolate_kernel(const Op& op, const std::vector<Tensor>& in,
                        const std::vector<Tensor>& out) {
  const Resize& r = detail::interpolate_attrs(op);
  Tensor x = in[0];
  if (!x.is_contiguous()) {
    NoGradGuard no_grad;
    x = contiguous(x);
  }
  const Taps th = make_taps(x.dim_size(2), r.out_h, r.factor_h, r);
  const Taps tw = make_taps(x.dim_size(3), r.out_w, r.factor_w, r);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    resize_kernel<T>(x, out[0], th, tw, r.bilinear);
  });
}

void interpolate_backward_kernel(const Op& op, const std::vector<Tensor>& in,
                                 const std::vector<Tensor>& out) {
  const detail::InterpolateBackwardAttrs& a = detail::interpolate_backward_attrs(op);
  const Resize& r = a.resize;
  Tensor g = in[0];
  if (!g.is_contiguous()) {
    NoGradGuard no_grad;
    g = contiguous(g);
  }
  const Taps th = make_taps(a.input_shape[2], r.out_h, r.factor_h, r);
  const Taps tw = make_taps(a.input_shape[3], r.out_w, r.factor_w, r);
  visit_dtype(g.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>)
      resize_backward_kernel<T>(g, out[0], th, tw);
  });
}

KILN_REGISTER_KERNEL("interpolate", DeviceType::CPU, interpolate_kernel);
KILN_REGISTER_KERNEL("interpolate_backward", DeviceType::CPU, interpolate_backward_kernel);

}  // namespace

}  // namespace kiln
