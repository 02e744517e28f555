// ConvGeometry and the padding arithmetic (Note [conv padding] in conv.h), and the shape and option
// checks of the convolution ops (checked_conv2d_geometry, which combines them, is in conv.cpp).
#include "kiln/ops/conv_geometry.h"

#include <algorithm>
#include <type_traits>

namespace kiln {
namespace detail {

// The fields' bytes: a key is built per convolution call, and formatting 18 numbers as text took
// a fifth of a small convolution's time.
std::string ConvGeometry::key() const {
  static_assert(std::has_unique_object_representations_v<ConvGeometry>);
  return {reinterpret_cast<const char*>(this), sizeof(ConvGeometry)};
}

std::pair<int64_t, int64_t> resolve_padding(const Padding& p, bool height, int64_t in, int64_t k,
                                            int64_t stride, int64_t dilation) {
  switch (p.kind) {
    case Padding::Kind::kExplicit:
      return height ? std::pair{p.top, p.bottom} : std::pair{p.left, p.right};
    case Padding::Kind::kSame: {
      const int64_t out = (in + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((out - 1) * stride + (k - 1) * dilation + 1 - in, 0);
      return {total / 2, total - total / 2};
    }
    case Padding::Kind::kValid:
    case Padding::Kind::kInvalid:
      break;
  }
  return {0, 0};
}

std::optional<ConvGeometry> conv_geometry(const Shape& x, const Shape& w, const Conv2dOptions& o) {
  ConvGeometry g;
  const size_t r = x.size();
  g.n = r == 4 ? x[0] : 1;
  g.c = x[r - 3];
  g.h = x[r - 2];
  g.w = x[r - 1];
  g.o = w[0];
  g.kh = w[2];
  g.kw = w[3];
  g.sh = o.stride.h;
  g.sw = o.stride.w;
  g.dh = o.dilation.h;
  g.dw = o.dilation.w;
  g.groups = o.groups;
  std::tie(g.pt, g.pb) = resolve_padding(o.padding, true, g.h, g.kh, g.sh, g.dh);
  std::tie(g.pl, g.pr) = resolve_padding(o.padding, false, g.w, g.kw, g.sw, g.dw);
  const int64_t span_h = g.h + g.pt + g.pb - g.dh * (g.kh - 1) - 1;
  const int64_t span_w = g.w + g.pl + g.pr - g.dw * (g.kw - 1) - 1;
  if (span_h < 0 || span_w < 0) return std::nullopt;
  g.oh = span_h / g.sh + 1;
  g.ow = span_w / g.sw + 1;
  return g;
}

void check_conv_options(const char* op, const Conv2dOptions& o, const Loc& loc) {
  if (o.stride.h <= 0 || o.stride.w <= 0)
    fail(op, loc, "expected a positive stride, but got [{}, {}]", o.stride.h, o.stride.w);
  if (o.dilation.h <= 0 || o.dilation.w <= 0)
    fail(op, loc, "expected a positive dilation, but got [{}, {}]", o.dilation.h, o.dilation.w);
  if (o.groups <= 0) fail(op, loc, "expected a positive number of groups, but got {}", o.groups);
  const Padding& p = o.padding;
  if (p.kind == Padding::Kind::kInvalid)
    fail(op, loc,
         "expected padding to be an int, an (h, w) pair, \"same\" or \"valid\", but got \"{}\"",
         p.mode);
  if (p.top < 0 || p.bottom < 0 || p.left < 0 || p.right < 0)
    fail(op, loc, "expected non-negative padding, but got {}", p.str());
}

std::string short_desc(const Tensor& t) {
  return dtype_name(t.dtype()) + shape_str(t.shape());
}

void check_activation(const char* op, const char* what, const Tensor& t, const Tensor& like,
                      const Loc& loc) {
  if (t.dim() != 3 && t.dim() != 4)
    fail(op, loc, "expected {} of rank 3 (C,H,W) or 4 (N,C,H,W), but got {}", what, t.describe());
  if (!is_floating(t.dtype()))
    fail(op, loc, "expected a floating-point {}, but got {}", what, t.describe());
  if (like.defined() && like.dtype() != t.dtype())
    fail(op, loc, "expected {} of the same dtype as {}, but got {}", what, short_desc(like),
         t.describe());
}

void check_weight(const char* op, const Tensor& w, const char* layout, const Tensor& like,
                  const Loc& loc) {
  if (w.dim() != 4) fail(op, loc, "expected weight of rank 4 {}, but got {}", layout, w.describe());
  if (w.dtype() != like.dtype())
    fail(op, loc, "expected weight of the same dtype as the input {}, but got {}", short_desc(like),
         w.describe());
  if (w.dim_size(2) == 0 || w.dim_size(3) == 0)
    fail(op, loc, "expected a non-empty kernel, but got weight {}", w.describe());
}

void fail_kernel_fit(const char* op, int64_t h, int64_t w, int64_t kh, int64_t kw,
                     const Conv2dOptions& o, const std::string& operands, const Loc& loc) {
  const auto [pt, pb] = resolve_padding(o.padding, true, h, kh, o.stride.h, o.dilation.h);
  const auto [pl, pr] = resolve_padding(o.padding, false, w, kw, o.stride.w, o.dilation.w);
  fail(op, loc,
       "expected the kernel ({}x{}, dilation {}x{}, spanning {}x{}) to fit in the padded input "
       "({}x{} with padding {}), but got {}",
       kh, kw, o.dilation.h, o.dilation.w, o.dilation.h * (kh - 1) + 1, o.dilation.w * (kw - 1) + 1,
       h + pt + pb, w + pl + pr, Padding::asymmetric(pt, pb, pl, pr).str(), operands);
}

}  // namespace detail
}  // namespace kiln
