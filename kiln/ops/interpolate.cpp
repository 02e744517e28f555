// interpolate (nearest / bilinear resize of [N, C, H, W]) and interpolate_backward; each is the
// other's vjp. Both are separable: per-dim tap tables (two source indices and weights per output
// index, Note [resize coordinate modes] in interpolate.h) drive one kernel per direction.
#include "kiln/ops/interpolate.h"

#include <cmath>

#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// The options after validation: output size known, coordinate mode named.
struct Resize {
  int64_t out_h = 0, out_w = 0;
  std::optional<double> factor_h, factor_w;  // the caller's scale factors, if given
  bool bilinear = false;
  std::string coordinate_mode;

  nlohmann::json json() const {
    return {{"size", {out_h, out_w}},
            {"scale_factor", {attr_optional(factor_h), attr_optional(factor_w)}},
            {"mode", bilinear ? "bilinear" : "nearest"},
            {"coordinate_mode", coordinate_mode}};
  }
  static Resize from_json(const Attrs& a) {
    Resize r;
    std::vector<int64_t> size = a.ints("size");
    if (size.size() != 2) a.fail("size", "must hold 2 integers (h, w)");
    r.out_h = size[0], r.out_w = size[1];
    const nlohmann::json& f = a.at("scale_factor");
    if (!f.is_array() || f.size() != 2) a.fail("scale_factor", "must hold 2 entries (h, w)");
    nlohmann::json fh = {{"v", f[0]}}, fw = {{"v", f[1]}};
    r.factor_h = Attrs(a.op(), fh).opt_f("v");
    r.factor_w = Attrs(a.op(), fw).opt_f("v");
    const std::string mode = a.s("mode");
    if (mode != "bilinear" && mode != "nearest")
      a.fail("mode", "must be \"nearest\" or \"bilinear\"");
    r.bilinear = mode == "bilinear";
    r.coordinate_mode = a.s("coordinate_mode");
    return r;
  }
};

// `t` is the tensor the caller passed, for error texts; `in` the [N, C, H, W] input shape.
Resize resolve(const char* op, const Shape& in, const InterpolateOptions& o, const Tensor& t,
               const Loc& loc) {
  if (in.size() != 4)
    fail(op, loc, "expected an input of rank 4 (N, C, H, W), but got {}",
         in == t.shape() ? t.describe() : shape_str(in) + " for " + t.describe());
  if (in[2] <= 0 || in[3] <= 0)
    fail(op, loc, "expected non-empty spatial dims, but got input shape {} for {}", shape_str(in),
         t.describe());
  Resize r;
  if (o.mode != "nearest" && o.mode != "bilinear")
    fail(op, loc, "expected mode \"nearest\" or \"bilinear\", but got \"{}\" for {}", o.mode,
         t.describe());
  r.bilinear = o.mode == "bilinear";
  r.coordinate_mode = o.coordinate_mode.empty()
                          ? (r.bilinear ? "align_corners_false" : "asymmetric")
                          : o.coordinate_mode;
  const std::string& c = r.coordinate_mode;
  const bool known = r.bilinear
                         ? (c == "align_corners" || c == "align_corners_false" ||
                            c == "half_pixel" || c == "pytorch_half_pixel" || c == "asymmetric")
                         : (c == "asymmetric" || c == "half_pixel");
  if (!known)
    fail(op, loc, "expected a coordinate_mode of {} for mode \"{}\", but got \"{}\" for {}",
         r.bilinear ? "\"align_corners\", \"align_corners_false\", \"half_pixel\", "
                      "\"pytorch_half_pixel\" or \"asymmetric\""
                    : "\"asymmetric\" or \"half_pixel\"",
         o.mode, c, t.describe());
  if (o.size.has_value() == o.scale_factor.has_value())
    fail(op, loc, "expected exactly one of size and scale_factor, but got {} for {}",
         o.size ? "both" : "neither", t.describe());
  if (o.size) {
    r.out_h = o.size->first;
    r.out_w = o.size->second;
  } else {
    const auto [fh, fw] = *o.scale_factor;
    if (!(fh > 0 && fw > 0 && std::isfinite(fh) && std::isfinite(fw)))
      fail(op, loc, "expected positive finite scale factors, but got ({}, {}) for {}", fh, fw,
           t.describe());
    r.factor_h = fh;
    r.factor_w = fw;
    r.out_h = static_cast<int64_t>(std::floor(static_cast<double>(in[2]) * fh));
    r.out_w = static_cast<int64_t>(std::floor(static_cast<double>(in[3]) * fw));
  }
  if (r.out_h <= 0 || r.out_w <= 0)
    fail(op, loc, "expected an output size > 0, but got ({}, {}) for input {}", r.out_h, r.out_w,
         t.describe());
  return r;
}

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
  const int64_t planes = x.size(0) * x.size(1), ih = x.size(2), iw = x.size(3);
  const int64_t oh = out.size(2), ow = out.size(3);
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
  const int64_t planes = gx.size(0) * gx.size(1), ih = gx.size(2), iw = gx.size(3);
  const int64_t oh = g.size(2), ow = g.size(3);
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

Tensor interpolate_resolved(const Tensor& x, const Resize& r, const Loc& loc);
Tensor interpolate_backward_resolved(const Tensor& g, const Shape& input_shape, const Resize& r,
                                     const Loc& loc);

class InterpolateOp final : public Op {
 public:
  explicit InterpolateOp(Resize r) : r_(std::move(r)) {}
  const char* name() const override { return "interpolate"; }
  nlohmann::json attrs() const override { return r_.json(); }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    if (r_.bilinear && !is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input for bilinear mode, but got {}",
           x.describe());
    return {{{x.size(0), x.size(1), r_.out_h, r_.out_w}, x.dtype(), x.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    Tensor x = in[0];
    if (!x.is_contiguous()) {
      NoGradGuard no_grad;
      x = contiguous(x);
    }
    const Taps th = make_taps(x.size(2), r_.out_h, r_.factor_h, r_);
    const Taps tw = make_taps(x.size(3), r_.out_w, r_.factor_w, r_);
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      resize_kernel<T>(x, out[0], th, tw, r_.bilinear);
    });
  }

  Saves saves() const override { return {false, false}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    return {
        interpolate_backward_resolved(ctx.grads[0], ctx.input_metas[0].shape, r_, Loc::current())};
  }

 private:
  Resize r_;
};

class InterpolateBackwardOp final : public Op {
 public:
  InterpolateBackwardOp(Shape input_shape, Resize r)
      : input_shape_(std::move(input_shape)), r_(std::move(r)) {}
  const char* name() const override { return "interpolate_backward"; }
  nlohmann::json attrs() const override {
    nlohmann::json j = r_.json();
    j["input_shape"] = input_shape_;
    return j;
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& g = in[0];
    if (!is_floating(g.dtype()))
      fail(name(), loc, "expected a floating-point grad, but got {}", g.describe());
    const Shape want{input_shape_[0], input_shape_[1], r_.out_h, r_.out_w};
    if (g.shape() != want)
      fail(name(), loc, "expected grad of the output shape {} (for input shape {}), but got {}",
           shape_str(want), shape_str(input_shape_), g.describe());
    return {{input_shape_, g.dtype(), g.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    Tensor g = in[0];
    if (!g.is_contiguous()) {
      NoGradGuard no_grad;
      g = contiguous(g);
    }
    const Taps th = make_taps(input_shape_[2], r_.out_h, r_.factor_h, r_);
    const Taps tw = make_taps(input_shape_[3], r_.out_w, r_.factor_w, r_);
    visit_dtype(g.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<compute_t<T>>)
        resize_backward_kernel<T>(g, out[0], th, tw);
    });
  }

  Saves saves() const override { return {false, false}; }

  // Linear in grad; the adjoint of the scatter is the forward resize.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    return {interpolate_resolved(ctx.grads[0], r_, Loc::current())};
  }

 private:
  Shape input_shape_;
  Resize r_;
};

KILN_REGISTER_OP("interpolate", (OpSchema{{"input"}, {"output"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const InterpolateOp>(Resize::from_json(a));
});
KILN_REGISTER_OP("interpolate_backward", (OpSchema{{"grad_output"}, {"grad_input"}}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const InterpolateBackwardOp>(a.ints("input_shape"),
                                                                        Resize::from_json(a));
                 });

Tensor interpolate_resolved(const Tensor& x, const Resize& r, const Loc& loc) {
  return call_op<InterpolateOp>({x}, loc, r);
}

Tensor interpolate_backward_resolved(const Tensor& g, const Shape& input_shape, const Resize& r,
                                     const Loc& loc) {
  return call_op<InterpolateBackwardOp>({g}, loc, input_shape, r);
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& options, const Loc& loc) {
  return interpolate_resolved(x, resolve("interpolate", x.shape(), options, x, loc), loc);
}

Tensor interpolate_backward(const Tensor& grad, const Shape& input_shape,
                            const InterpolateOptions& options, const Loc& loc) {
  return interpolate_backward_resolved(
      grad, input_shape, resolve("interpolate_backward", input_shape, options, grad, loc), loc);
}

}  // namespace kiln
