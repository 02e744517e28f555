// The convolution kernels: oneDNN for float32 (and 16-bit floats, computed in float32), reference
// loops for float64, plus the geometry and option checks the conv ops share.
#include "kiln/ops/conv_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>

#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dnnl_utils.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

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

const char* conv_algorithm_name(ConvAlgorithm a) {
  switch (a) {
    case ConvAlgorithm::kAuto:
      return "auto";
    case ConvAlgorithm::kDirect:
      return "direct";
    case ConvAlgorithm::kWinograd:
      return "winograd";
  }
  return "?";
}

const char* conv_purpose_name(ConvPurpose p) {
  return p == ConvPurpose::kInference ? "inference" : "training";
}

nlohmann::json conv_attrs(const Conv2dOptions& o) {
  nlohmann::json padding;
  if (o.padding.kind == Padding::Kind::kExplicit)
    padding = {o.padding.top, o.padding.bottom, o.padding.left, o.padding.right};
  else
    padding = o.padding.str();
  return {{"stride", {o.stride.h, o.stride.w}},
          {"padding", padding},
          {"dilation", {o.dilation.h, o.dilation.w}},
          {"groups", o.groups},
          {"algorithm", conv_algorithm_name(o.algorithm)}};
}

nlohmann::json conv_forward_attrs(const Conv2dOptions& o, ConvPurpose purpose) {
  nlohmann::json a = conv_attrs(o);
  a["purpose"] = conv_purpose_name(purpose);
  return a;
}

Conv2dOptions conv_options_from_attrs(const Attrs& a) {
  auto pair = [&](const char* key) {
    std::vector<int64_t> v = a.ints(key);
    if (v.size() != 2) a.fail(key, "must hold 2 integers (h, w)");
    return Size2(v[0], v[1]);
  };
  Conv2dOptions o;
  o.stride = pair("stride");
  o.dilation = pair("dilation");
  o.groups = a.i("groups");
  if (a.at("padding").is_string()) {
    o.padding = Padding(a.s("padding"));
  } else {
    std::vector<int64_t> p = a.ints("padding");
    if (p.size() != 4)
      a.fail("padding", "must be a string or 4 integers [top, bottom, left, right]");
    o.padding = Padding::asymmetric(p[0], p[1], p[2], p[3]);
  }
  const std::string algorithm = a.s("algorithm");
  if (algorithm == "auto")
    o.algorithm = ConvAlgorithm::kAuto;
  else if (algorithm == "direct")
    o.algorithm = ConvAlgorithm::kDirect;
  else if (algorithm == "winograd")
    o.algorithm = ConvAlgorithm::kWinograd;
  else
    a.fail("algorithm",
           fmt::format("must be \"auto\", \"direct\" or \"winograd\", but is \"{}\"", algorithm));
  return o;
}

// No "auto" purpose: an op holds the decision its public function made (Note [conv algorithm]).
ConvPolicy conv_policy_from_attrs(const Attrs& a) {
  ConvPolicy p{conv_options_from_attrs(a).algorithm, ConvPurpose::kTraining};
  const std::string purpose = a.s("purpose");
  if (purpose == "inference")
    p.purpose = ConvPurpose::kInference;
  else if (purpose != "training")
    a.fail("purpose", fmt::format("must be \"training\" or \"inference\", but is \"{}\"", purpose));
  return p;
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
  if (w.size(2) == 0 || w.size(3) == 0)
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

namespace {

// A contiguous copy of t (t itself when already contiguous), converted to dtype.
Tensor dense(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor out = empty(t.shape(), {dtype});
  copy_into(out, t);
  return out;
}

// Rows of work below this many multiply-adds stay on one thread.
int64_t grain_for(int64_t work_per_row) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(work_per_row, 1));
}

// --- reference loops (float64) -------------------------------------------------------------------

// Note [conv reference loops]: every output element is one sum in a fixed order (channels, then
// kernel rows, then kernel columns; for the weight gradient: batch, then output rows, then
// columns), and threads split whole output planes, so the result is the same for every thread
// count. The data gradient gathers (each input element sums its contributions) instead of
// scattering, so no two threads write one element.
void ref_forward(const ConvGeometry& g, const double* x, const double* w, const double* b,
                 double* y) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t grain = grain_for(g.oh * g.ow * cg * g.kh * g.kw);
  parallel_for(0, g.n * g.o, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.o, o = r % g.o;
      const double* xn = x + (n * g.c + (o / og) * cg) * g.h * g.w;
      const double* wo = w + o * cg * g.kh * g.kw;
      double* yo = y + r * g.oh * g.ow;
      for (int64_t i = 0; i < g.oh; ++i) {
        for (int64_t j = 0; j < g.ow; ++j) {
          double acc = b ? b[o] : 0.0;
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t ki = 0; ki < g.kh; ++ki) {
              const int64_t ih = i * g.sh - g.pt + ki * g.dh;
              if (ih < 0 || ih >= g.h) continue;
              const double* xr = xn + (c * g.h + ih) * g.w;
              const double* wr = wo + (c * g.kh + ki) * g.kw;
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t iw = j * g.sw - g.pl + kj * g.dw;
                if (iw >= 0 && iw < g.w) acc += xr[iw] * wr[kj];
              }
            }
          }
          yo[i * g.ow + j] = acc;
        }
      }
    }
  });
}

void ref_backward_data(const ConvGeometry& g, const double* gy, const double* w, double* gx) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t grain = grain_for(g.h * g.w * og * g.kh * g.kw);
  parallel_for(0, g.n * g.c, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.c, c = r % g.c, grp = c / cg, cl = c % cg;
      const double* gyn = gy + (n * g.o + grp * og) * g.oh * g.ow;
      double* gxc = gx + r * g.h * g.w;
      for (int64_t ih = 0; ih < g.h; ++ih) {
        for (int64_t iw = 0; iw < g.w; ++iw) {
          double acc = 0.0;
          for (int64_t oo = 0; oo < og; ++oo) {
            const double* go = gyn + oo * g.oh * g.ow;
            const double* wo = w + ((grp * og + oo) * cg + cl) * g.kh * g.kw;
            for (int64_t ki = 0; ki < g.kh; ++ki) {
              const int64_t ti = ih + g.pt - ki * g.dh;
              if (ti < 0 || ti % g.sh != 0 || ti / g.sh >= g.oh) continue;
              const double* gr = go + (ti / g.sh) * g.ow;
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t tj = iw + g.pl - kj * g.dw;
                if (tj < 0 || tj % g.sw != 0 || tj / g.sw >= g.ow) continue;
                acc += gr[tj / g.sw] * wo[ki * g.kw + kj];
              }
            }
          }
          gxc[ih * g.w + iw] = acc;
        }
      }
    }
  });
}

void ref_backward_weights(const ConvGeometry& g, const double* x, const double* gy, double* gw) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t grain = grain_for(g.n * g.oh * g.ow * g.kh * g.kw);
  parallel_for(0, g.o * cg, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / cg, c = (o / og) * cg + r % cg;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          double acc = 0.0;
          for (int64_t n = 0; n < g.n; ++n) {
            const double* xc = x + (n * g.c + c) * g.h * g.w;
            const double* go = gy + (n * g.o + o) * g.oh * g.ow;
            for (int64_t i = 0; i < g.oh; ++i) {
              const int64_t ih = i * g.sh - g.pt + ki * g.dh;
              if (ih < 0 || ih >= g.h) continue;
              for (int64_t j = 0; j < g.ow; ++j) {
                const int64_t iw = j * g.sw - g.pl + kj * g.dw;
                if (iw >= 0 && iw < g.w) acc += go[i * g.ow + j] * xc[ih * g.w + iw];
              }
            }
          }
          gw[(r * g.kh + ki) * g.kw + kj] = acc;
        }
      }
    }
  });
}

// --- oneDNN (float32) ----------------------------------------------------------------------------

// Note [conv layouts]: kiln's tensors hold plain layouts (nchw activations, oihw / goihw
// weights). Primitives created for plain layouts run oneDNN's im2col + GEMM fallback, 1.5-3x
// slower than its direct kernels, which want blocked layouts (nChw16c, OIhw16i16o, ...). So each
// primitive is created with format_tag::any, oneDNN picks its layouts, and every operand whose
// chosen layout differs from kiln's is reordered in (inputs) or out (the output) around the call,
// as PyTorch's mkldnn path does. Primitives and reorders are cached by geometry. Where the
// chosen layout is NHWC (single-image inference), kiln holds the activations channels-last
// instead, so neither the input nor the output is reordered (Note [channels-last]); blocked
// layouts (nChw8c, chosen for larger batches) are not expressible as strides and are still
// reordered per call.
//
// Note [conv determinism]: the forward and data-gradient primitives compute each output element
// as one dot product. oneDNN's weight gradient may split the batch between threads and add the
// partial sums, so its last bits can depend on the thread count (float32 only; the float64 loops
// never do).
// Note [conv inference kind]: oneDNN 2.6 answers prop_kind forward_inference with its brgemm
// kernels and forward_training with its direct jit kernels (same math, different blocking).
// Measured on ResNet-18 without grad, 2 threads (kiln_profile --workload resnet18-infer): batch 1
// 6.2 ms with brgemm vs 7.2 ms direct, but batch 2 12.8 vs 10.0, batch 4 23.7 vs 18.4 and batch
// 64 360 vs 275 ms. So kInference, the forward_inference primitive, is used for forwards of a
// single image whose purpose is inference (Note [conv algorithm]); it is chosen by the op's
// attributes and the shape alone, so results never depend on timing or grad mode.
//
// Note [conv winograd]: for an inference forward of a batch (more than one image) with a 3x3
// kernel, stride 1, dilation 1 and no groups, kiln asks oneDNN for its Winograd F(4x4, 3x3) kernel
// (jit_wino_4x3), which does the work of the direct kernel in about half the multiplications:
// measured on this machine at batch 64, 64->64 channels at 32x32 11.7 ms vs 21.8 ms (brgemm) and
// 16-17 ms (direct, in the network), 512->512 at 4x4 10.9 vs 30.3 ms. Its rounding differs from
// the direct kernel's: against a float64 reference, the largest error relative to the largest
// output was 1.2e-6 to 2.4e-6 (direct: 0.7e-6 to 1.6e-6) over 64..512 channels, and
// tests/ops/test_conv_winograd.cpp holds it under 1e-5. Where oneDNN has no Winograd kernel for
// the shape (channel counts, post-ops), the direct kernel runs. This is ConvAlgorithm::kAuto's
// choice (Note [conv algorithm] in conv.h); under kAuto, training (the "training" purpose) and
// single images never use it: the gradients keep the direct kernels' numerics, and at batch 1 the
// transformed weights (4x the size) would stream from memory on every call. kWinograd asks for it
// in every case, kDirect in none. The Winograd primitive is created for forward_inference in both
// purposes: a convolution's forward keeps no state for its backward (no workspace), so the prop
// kind only selects kernels.
enum class Pass { kForward, kInference, kWinograd, kBackwardData, kBackwardWeights };

bool is_forward(Pass p) {
  return p == Pass::kForward || p == Pass::kInference || p == Pass::kWinograd;
}

struct ConvDescs {
  dnnl::memory::desc src, wei, bias, dst;
  dnnl::memory::dims strides, dilates, pad_l, pad_r;
};

// What shapes a primitive beyond the geometry: which activations (the input-shaped one and the
// output-shaped one, whatever the pass) kiln holds channels-last (Note [channels-last]) rather
// than contiguous, and the forward's fused epilogue (Note [conv epilogue]).
struct ActivationLayouts {
  bool src_nhwc = false, dst_nhwc = false;
  bool sum = false, relu = false;
  char key() const {
    return static_cast<char>('0' + (src_nhwc ? 1 : 0) + (dst_nhwc ? 2 : 0) + (sum ? 4 : 0) +
                             (relu ? 8 : 0));
  }
};

ConvDescs conv_descs(const ConvGeometry& g, bool with_bias, bool any, ActivationLayouts l = {}) {
  using tag = dnnl::memory::format_tag;
  const auto f32 = dnnl::memory::data_type::f32;
  const auto plain = [&](bool nhwc) { return any ? tag::any : nhwc ? tag::nhwc : tag::nchw; };
  ConvDescs d;
  d.src = dnnl::memory::desc({g.n, g.c, g.h, g.w}, f32, plain(l.src_nhwc));
  d.dst = dnnl::memory::desc({g.n, g.o, g.oh, g.ow}, f32, plain(l.dst_nhwc));
  d.wei = g.groups == 1
              ? dnnl::memory::desc({g.o, g.c, g.kh, g.kw}, f32, any ? tag::any : tag::oihw)
              : dnnl::memory::desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, f32,
                                   any ? tag::any : tag::goihw);
  if (with_bias) d.bias = dnnl::memory::desc({g.o}, f32, tag::x);
  d.strides = {g.sh, g.sw};
  d.dilates = {g.dh - 1, g.dw - 1};  // oneDNN counts the gaps: 0 is a dense kernel
  d.pad_l = {g.pt, g.pl};
  d.pad_r = {g.pb, g.pr};
  return d;
}

// One operand of a pass: kiln's plain layout, the primitive's, and the reorder between them
// (empty when they agree).
struct Operand {
  int arg = 0;
  dnnl::memory::desc plain, chosen;
  dnnl::reorder reorder;
  bool needs_reorder() const { return plain != chosen; }
};

struct ConvEntry {
  dnnl::primitive primitive;
  Operand a, b, out;  // the pass's two inputs (in the kernels' order) and its output
  dnnl::memory::desc bias, scratch;
  // oneDNN's reference implementation was the only one to accept the request (some post-op
  // combinations), orders of magnitude slower than its jit kernels.
  bool reference = false;
  // A Winograd pass found a Winograd kernel (else its primitive is the direct one).
  bool winograd = false;
  std::string implementation;  // oneDNN's name for the kernel (impl_info_str)
};

// Entries are shared, not copied: a ConvEntry holds eight memory descriptors of ~1 KB each.
LruCache<std::shared_ptr<const ConvEntry>>& conv_cache() {
  static auto* cache = new LruCache<std::shared_ptr<const ConvEntry>>(256);
  return *cache;
}

Operand operand(int arg, const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen,
                bool is_output) {
  Operand o{arg, plain, chosen, {}};
  if (o.needs_reorder()) {
    dnnl::engine& eng = dnnl_engine();
    o.reorder = is_output ? dnnl::reorder(dnnl::reorder::primitive_desc(eng, chosen, eng, plain))
                          : dnnl::reorder(dnnl::reorder::primitive_desc(eng, plain, eng, chosen));
  }
  return o;
}

ConvEntry build_conv(Pass pass, const ConvGeometry& g, bool with_bias, ActivationLayouts layouts) {
  const ConvDescs plain = conv_descs(g, with_bias, /*any=*/false, layouts);
  const ConvDescs d = conv_descs(g, with_bias, /*any=*/true);
  const auto alg = dnnl::algorithm::convolution_direct;
  dnnl::engine& eng = dnnl_engine();
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (layouts.sum || layouts.relu) {
    // Note [conv epilogue]: y = relu(conv(x, w * scale) + shift + y_before), in this order (the
    // shift is the bias).
    dnnl::post_ops po;
    if (layouts.sum) po.append_sum(1.0f);
    if (layouts.relu) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  auto forward_desc = [&](dnnl::prop_kind prop, dnnl::algorithm a) {
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(prop, a, d.src, d.wei, d.bias, d.dst, d.strides, d.dilates,
                                        d.pad_l, d.pad_r),
        attr, eng);
  };
  std::optional<dnnl::convolution_forward::primitive_desc> winograd;
  if (pass == Pass::kWinograd) {  // Note [conv winograd]
    try {
      winograd =
          forward_desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd);
      if (std::string(winograd->impl_info_str()).starts_with("ref")) winograd.reset();
    } catch (const dnnl::error&) {
      winograd.reset();  // no Winograd kernel for this shape or these post-ops
    }
  }
  const dnnl::convolution_forward::primitive_desc fwd =
      winograd ? *winograd
               : forward_desc(pass == Pass::kInference ? dnnl::prop_kind::forward_inference
                                                       : dnnl::prop_kind::forward_training,
                              alg);
  ConvEntry e;
  e.bias = plain.bias;
  if (is_forward(pass)) {
    e.primitive = dnnl::convolution_forward(fwd);
    e.implementation = fwd.impl_info_str();
    e.reference = e.implementation.starts_with("ref");
    e.winograd = winograd.has_value();
    e.scratch = fwd.scratchpad_desc();
    e.a = operand(DNNL_ARG_SRC, plain.src, fwd.src_desc(), false);
    e.b = operand(DNNL_ARG_WEIGHTS, plain.wei, fwd.weights_desc(), false);
    e.out = operand(DNNL_ARG_DST, plain.dst, fwd.dst_desc(), true);
  } else if (pass == Pass::kBackwardData) {
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(alg, d.src, d.wei, d.dst, d.strides, d.dilates,
                                              d.pad_l, d.pad_r),
        attr, eng, fwd);
    e.primitive = dnnl::convolution_backward_data(pd);
    e.scratch = pd.scratchpad_desc();
    e.a = operand(DNNL_ARG_DIFF_DST, plain.dst, pd.diff_dst_desc(), false);
    e.b = operand(DNNL_ARG_WEIGHTS, plain.wei, pd.weights_desc(), false);
    e.out = operand(DNNL_ARG_DIFF_SRC, plain.src, pd.diff_src_desc(), true);
  } else {
    dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(alg, d.src, d.wei, d.dst, d.strides, d.dilates,
                                                 d.pad_l, d.pad_r),
        attr, eng, fwd);
    e.primitive = dnnl::convolution_backward_weights(pd);
    e.scratch = pd.scratchpad_desc();
    e.a = operand(DNNL_ARG_SRC, plain.src, pd.src_desc(), false);
    e.b = operand(DNNL_ARG_DIFF_DST, plain.dst, pd.diff_dst_desc(), false);
    e.out = operand(DNNL_ARG_DIFF_WEIGHTS, plain.wei, pd.diff_weights_desc(), true);
  }
  return e;
}

// A float32 buffer of `bytes` from kiln's caching allocator, for a blocked copy of an operand.
Tensor scratch(const dnnl::memory::desc& desc) {
  return empty({static_cast<int64_t>((desc.get_size() + 3) / 4)}, {DType::Float32});
}

// Weight w (dense float32 [O, ...]), times fold[o] per output channel when fold is given, in
// operand op's chosen layout: w itself when nothing is to be done.
Tensor fold_and_block(const Tensor& w, const Tensor* fold, const Operand& op) {
  Tensor src = w;
  if (fold != nullptr) {
    NoGradGuard no_grad;
    src = mul(w, reshape(*fold, {w.size(0), 1, 1, 1}));
  }
  if (!op.needs_reorder()) return src;
  Tensor blocked = scratch(op.chosen);
  dnnl::engine& eng = dnnl_engine();
  dnnl::memory plain(op.plain, eng, src.raw_data()), out(op.chosen, eng, blocked.raw_data());
  op.reorder.execute(dnnl_stream(), plain, out);
  dnnl_stream().wait();
  return blocked;
}

std::vector<float> values(const Tensor* fold) {
  if (fold == nullptr) return {};
  const auto* f = static_cast<const float*>(fold->raw_data());
  return {f, f + fold->numel()};
}

// Note [conv weight cache]: reordering the weights into the primitive's blocked layout reads and
// writes every weight on every call; for ResNet-18 at batch 1 that is most of the forward. For
// forwards whose purpose is inference (no gradient recorded: Note [conv algorithm]), the blocked
// copy of a float32 weight is cached, keyed by the weight's storage (held weakly, so a freed
// storage never matches a new one at the same address), its offset, its version counter and the
// layout. Every in-place write through kiln (optimizer steps, copy_, load_state_dict) bumps the
// version, so a changed weight misses; code writing a weight through raw_data() must bump the
// version itself. Training passes never use it: their weights change every step, and the copies
// would only add memory.
//
// A folded weight (Note [conv epilogue]) is cached the same way; the per-channel scale it was
// multiplied by is part of the key, compared by value, since callers compute it afresh per call.
//
// The same kind of cache, two entries deep, serves a convolution's backward: the data and weight
// gradients both read grad_output in the same blocked layout, so the second pass takes the
// first's copy instead of reordering it again.
class BlockedCache {
 public:
  explicit BlockedCache(size_t max_entries) : max_entries_(max_entries) {}

  // The copy of plain tensor t (times `fold` per output channel when given, a float32 [O]) in
  // operand op's chosen layout, computed by fold_and_block on a miss.
  Tensor get(const Tensor& t, const Operand& op, const Tensor* fold = nullptr) {
    std::vector<float> scale = values(fold);
    Tensor blocked = find(t, op.chosen, scale);
    if (blocked.defined()) return blocked;
    blocked = fold_and_block(t, fold, op);
    put(t, op.chosen, blocked, std::move(scale));
    return blocked;
  }

 private:
  // The cached copy of plain tensor t in layout `chosen` (of t times `fold` per output channel,
  // when fold is not empty), or an undefined Tensor.
  Tensor find(const Tensor& t, const dnnl::memory::desc& chosen, const std::vector<float>& fold) {
    const std::string k = key(t, chosen);
    std::lock_guard<std::mutex> lock(mutex_);
    for (Entry& e : entries_)
      if (e.key == k && e.chosen == chosen && e.version == t.version() && e.fold == fold &&
          e.storage.lock() == t.storage()) {
        e.last_use = ++clock_;
        return e.blocked;
      }
    return {};
  }

  // Records `blocked` as t's copy in layout `chosen`.
  void put(const Tensor& t, const dnnl::memory::desc& chosen, Tensor blocked,
           std::vector<float> fold) {
    std::lock_guard<std::mutex> lock(mutex_);
    evict();
    entries_.push_back({key(t, chosen), chosen, t.storage(), t.version(), std::move(fold),
                        std::move(blocked), ++clock_});
  }

  struct Entry {
    std::string key;
    dnnl::memory::desc chosen;
    std::weak_ptr<Storage> storage;
    uint64_t version = 0;
    std::vector<float> fold;
    Tensor blocked;
    uint64_t last_use = 0;
  };
  static std::string key(const Tensor& t, const dnnl::memory::desc& chosen) {
    // The strides tell apart two views of one storage that have the same shape (a permutation of
    // equal dims). Raw bytes, not text: this runs on every convolution call.
    const void* storage = t.storage().get();
    const int64_t fields[2] = {t.storage_offset(), static_cast<int64_t>(chosen.get_size())};
    std::string k(reinterpret_cast<const char*>(&storage), sizeof(storage));
    k.append(reinterpret_cast<const char*>(fields), sizeof(fields));
    k.append(reinterpret_cast<const char*>(t.strides().data()),
             t.strides().size() * sizeof(int64_t));
    return k;
  }
  // Drops the entries whose tensors are gone or changed, or else the least recently used one.
  void evict() {
    std::erase_if(entries_, [](const Entry& e) {
      auto st = e.storage.lock();
      return !st || st->version() != e.version;
    });
    if (entries_.size() < max_entries_) return;
    entries_.erase(
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& x, const Entry& y) { return x.last_use < y.last_use; }));
  }
  size_t max_entries_;
  uint64_t clock_ = 0;
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

BlockedCache& weight_cache() {
  static auto* cache = new BlockedCache(1024);
  return *cache;
}

BlockedCache& grad_output_cache() {
  static auto* cache = new BlockedCache(2);
  return *cache;
}

// Note [blocked activations]: for inference, batched convolutions (oneDNN's direct kernels)
// compute in a blocked layout (nChw16c), which strides cannot express, so each one would reorder
// its input in and its output out. When a convolution's output is the next one's input (ResNet's
// conv-bn-relu chains after folding, Note [conv epilogue]) the second reorder only undoes the
// first, and the plain output is never read at all. So an inference convolution that writes its
// whole output itself leaves the output's storage holding the blocked result (Note [deferred
// contents] in core/storage.h), and a convolution reading that tensor, as its input or as the
// residual of its sum post-op, takes the blocked form directly. Anything else that touches the
// memory (another op, a print, a copy, an in-place write) makes the storage write the plain
// contents first, so no other code sees a difference. A pending output keeps its blocked buffer
// alive until it is written out or freed.
class BlockedActivation final : public DeferredContents {
 public:
  BlockedActivation(Tensor blocked, const Operand& out)
      : blocked(std::move(blocked)), chosen(out.chosen), plain(out.plain), to_plain(out.reorder) {}
  void write(void* data) const override {
    dnnl::engine& eng = dnnl_engine();
    dnnl::memory from(chosen, eng, blocked.raw_data()), to(plain, eng, data);
    to_plain.execute(dnnl_stream(), from, to);
    dnnl_stream().wait();
  }
  const Tensor blocked;
  const dnnl::memory::desc chosen, plain;
  const dnnl::reorder to_plain;
};

// The blocked form of t in layout `chosen`, when t's storage holds one not yet written out and t
// is the whole of it, read as `plain`; else an undefined Tensor.
Tensor pending_blocked(const Tensor& t, const dnnl::memory::desc& plain,
                       const dnnl::memory::desc& chosen) {
  if (t.storage_offset() != 0) return {};
  const std::shared_ptr<const DeferredContents> d = t.storage()->deferred();
  const auto* b = dynamic_cast<const BlockedActivation*>(d.get());
  if (b == nullptr || b->chosen != chosen || b->plain != plain) return {};
  return b->blocked;
}

// oneDNN sizes a primitive's scratchpad for the team it was created with, so the team size is
// part of the key.
std::shared_ptr<const ConvEntry> conv_entry(Pass pass, const ConvGeometry& g, bool with_bias,
                                            ActivationLayouts l) {
  std::string key = g.key();
  const int threads = get_num_threads();
  key.append(reinterpret_cast<const char*>(&threads), sizeof(threads));
  key += {static_cast<char>('0' + static_cast<int>(pass)), with_bias ? 'b' : '-', l.key()};
  return conv_cache().get_or_create(
      key, [&] { return std::make_shared<const ConvEntry>(build_conv(pass, g, with_bias, l)); });
}

// A float32 activation oneDNN can read as it is: t itself when it is float32 and contiguous or
// channels-last, else a copy in t's layout (channels-last stays channels-last).
Tensor dense_activation(const Tensor& t) {
  const bool last = t.is_channels_last();
  if ((t.is_contiguous() || last) && t.dtype() == DType::Float32) return t;
  Tensor out = empty(t.shape(), {DType::Float32, t.device(), false,
                                 last ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous});
  copy_into(out, t);
  return out;
}

Pass forward_pass(const ConvGeometry& g, ConvPolicy p, bool with_bias, ActivationLayouts l);

// Runs one pass on float32 operands; `a` and `b` are the pass's two inputs in the order of the
// kernels below, `bias` the forward's bias (may be null), `ep` a forward's epilogue (may be null).
// For a forward, `pass` is kForward and policy p picks the pass that runs (forward_pass); the
// backward passes ignore p. `publish`: out is the op's result, written here and nowhere else
// (Note [blocked activations]).
void onednn_conv(Pass pass, ConvPolicy p, const ConvGeometry& g, const Tensor& a, const Tensor& b,
                 const Tensor* bias, const Tensor& out, const ConvEpilogue* ep = nullptr,
                 bool publish = false) {
  // The activations among the operands: a and out always, b in the weight gradient.
  const bool weights_pass = pass == Pass::kBackwardWeights;
  const Tensor a32 = dense_activation(a);
  const Tensor b32 = weights_pass ? dense_activation(b) : dense(b, DType::Float32);
  ActivationLayouts layouts;
  if (pass == Pass::kBackwardData) {
    layouts = {out.is_channels_last(), a32.is_channels_last()};
  } else {
    layouts.src_nhwc = a32.is_channels_last();
    layouts.dst_nhwc = weights_pass ? b32.is_channels_last() : out.is_channels_last();
  }
  // A folded epilogue's scale multiplies the weights and its shift is the bias.
  Tensor scale32, shift32;
  if (ep != nullptr) {
    layouts.sum = ep->residual.defined();
    layouts.relu = ep->relu;
    if (ep->scale.defined()) {
      scale32 = dense(ep->scale, DType::Float32);
      shift32 = dense(ep->shift, DType::Float32);
      bias = &shift32;
    }
  }
  const bool forward = is_forward(pass);
  if (forward) pass = forward_pass(g, p, bias != nullptr, layouts);
  const std::shared_ptr<const ConvEntry> entry = conv_entry(pass, g, bias != nullptr, layouts);
  const ConvEntry& e = *entry;
  const bool direct = out.dtype() == DType::Float32;
  const Tensor o32 = direct
                         ? out
                         : empty(out.shape(), {DType::Float32, out.device(), false,
                                               out.is_channels_last() ? MemoryFormat::kChannelsLast
                                                                      : MemoryFormat::kContiguous});
  dnnl::engine& eng = dnnl_engine();
  dnnl::stream& s = dnnl_stream();
  std::vector<Tensor> keep;  // blocked copies live until the primitive has run
  std::unordered_map<int, dnnl::memory> args;
  // Forward weights are `b` (Note [conv weight cache]).
  const bool inference_forward = forward && p.inference();
  const bool cached_weight =
      inference_forward && b32.is_same(b) && (e.b.needs_reorder() || scale32.defined());
  const Tensor* fold = scale32.defined() ? &scale32 : nullptr;
  for (const auto& [op, t] : {std::pair{&e.a, &a32}, std::pair{&e.b, &b32}}) {
    if (op == &e.b && fold != nullptr && !cached_weight) {
      keep.push_back(fold_and_block(b32, fold, *op));
      args[op->arg] = dnnl::memory(op->chosen, eng, keep.back().raw_data());
      continue;
    }
    if (op == &e.a && forward && op->needs_reorder() && t->is_same(a)) {
      // Note [blocked activations]: checked before raw_data(), which would write `a` out.
      Tensor pending = pending_blocked(a, op->plain, op->chosen);
      if (pending.defined()) {
        keep.push_back(pending);
        args[op->arg] = dnnl::memory(op->chosen, eng, pending.raw_data());
        continue;
      }
    }
    if (op == &e.b && cached_weight) {
      keep.push_back(weight_cache().get(b, *op, fold));
      args[op->arg] = dnnl::memory(op->chosen, eng, keep.back().raw_data());
      continue;
    }
    dnnl::memory plain(op->plain, eng, t->raw_data());
    if (!op->needs_reorder()) {
      args[op->arg] = plain;
      continue;
    }
    // grad_output: `a` of the data gradient, `b` of the weight gradient.
    const Tensor& original = op == &e.a ? a : b;
    const bool is_grad_output = (pass == Pass::kBackwardData && op == &e.a) ||
                                (pass == Pass::kBackwardWeights && op == &e.b);
    if (is_grad_output && t->is_same(original)) {
      keep.push_back(grad_output_cache().get(original, *op));
      args[op->arg] = dnnl::memory(op->chosen, eng, keep.back().raw_data());
      continue;
    }
    keep.push_back(scratch(op->chosen));
    dnnl::memory blocked(op->chosen, eng, keep.back().raw_data());
    op->reorder.execute(s, plain, blocked);
    args[op->arg] = blocked;
  }
  dnnl::memory out_plain(e.out.plain, eng, o32.raw_data());
  Tensor out_blocked;
  if (e.out.needs_reorder()) {
    out_blocked = scratch(e.out.chosen);
    args[e.out.arg] = dnnl::memory(e.out.chosen, eng, out_blocked.raw_data());
  } else {
    args[e.out.arg] = out_plain;
  }
  if (layouts.sum) {
    // The sum post-op adds what the destination holds before the call: the residual, copied
    // from its blocked form when it has one (Note [blocked activations]), else reordered
    // straight into a blocked destination when it has the output's plain layout.
    const Tensor& r = ep->residual;
    const bool same_plain = r.dtype() == DType::Float32 &&
                            (o32.is_channels_last() ? r.is_channels_last() : r.is_contiguous());
    const Tensor pending = e.out.needs_reorder() && same_plain
                               ? pending_blocked(r, e.out.plain, e.out.chosen)
                               : Tensor();
    if (pending.defined()) {
      std::memcpy(out_blocked.raw_data(), pending.raw_data(), e.out.chosen.get_size());
    } else if (e.out.needs_reorder() && same_plain) {
      dnnl::memory rm(e.out.plain, eng, r.raw_data());
      dnnl::reorder(rm, args[e.out.arg]).execute(s, rm, args[e.out.arg]);
    } else {
      copy_into(o32, r);
      if (e.out.needs_reorder())
        dnnl::reorder(out_plain, args[e.out.arg]).execute(s, out_plain, args[e.out.arg]);
    }
  }
  Tensor bias32;
  if (bias != nullptr) {
    bias32 = dense(*bias, DType::Float32);
    args[DNNL_ARG_BIAS] = dnnl::memory(e.bias, eng, bias32.raw_data());
  }
  const Tensor scratchpad = scratchpad_for(e.scratch);
  if (scratchpad.defined())
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(e.scratch, eng, scratchpad.raw_data());
  e.primitive.execute(s, args);
  // Note [blocked activations]: the output stays blocked until someone reads its memory.
  const bool defer = publish && direct && inference_forward && e.out.needs_reorder() &&
                     out.storage_offset() == 0 && out.nbytes() == out.storage()->nbytes();
  if (e.out.needs_reorder() && !defer) e.out.reorder.execute(s, args[e.out.arg], out_plain);
  s.wait();
  if (defer) out.storage()->defer(std::make_shared<BlockedActivation>(out_blocked, e.out));
  if (!direct) copy_into(out, o32);
}

const double* f64(const Tensor& t) {
  return static_cast<const double*>(t.raw_data());
}

// Empty outputs need no work; an empty reduction (no channels or no batch) gives zeros, which
// oneDNN would reject as zero-sized memory.
bool trivial(const Tensor& out, int64_t reduced) {
  if (out.numel() == 0) return true;
  if (reduced != 0) return false;
  std::memset(out.raw_data(), 0, out.nbytes());
  return true;
}

// The direct forward pass of policy p (Note [conv inference kind]).
Pass direct_pass(const ConvGeometry& g, ConvPolicy p) {
  return p.inference() && g.n == 1 ? Pass::kInference : Pass::kForward;
}

// The forward pass policy p asks for (Note [conv algorithm], Note [conv winograd]).
Pass requested_pass(const ConvGeometry& g, ConvPolicy p) {
  switch (p.algorithm) {
    case ConvAlgorithm::kWinograd:
      return Pass::kWinograd;
    case ConvAlgorithm::kDirect:
      return direct_pass(g, p);
    case ConvAlgorithm::kAuto:
      break;
  }
  if (!p.inference() || g.n == 1) return direct_pass(g, p);
  // With few input channels (an RGB stem) the transforms outweigh the saving: 3 -> 64 channels
  // at batch 64 took 5.5 ms with Winograd, 1.6 ms direct.
  const bool winograd_shape = g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
                              g.dw == 1 && g.groups == 1 && g.c >= 16;
  return winograd_shape ? Pass::kWinograd : Pass::kForward;
}

// The forward pass that runs for policy p, with a bias or not, on operands in layouts l: the
// requested one, except that a Winograd request oneDNN has no kernel for runs the direct pass of
// the same purpose.
Pass forward_pass(const ConvGeometry& g, ConvPolicy p, bool with_bias, ActivationLayouts l) {
  const Pass pass = requested_pass(g, p);
  if (pass == Pass::kWinograd && !conv_entry(pass, g, with_bias, l)->winograd)
    return direct_pass(g, p);
  return pass;
}

}  // namespace

MemoryFormat conv_output_format(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                bool with_bias, const ConvEpilogue* ep) {
  // Channels-last outputs are limited to the single-image inference pass, whose brgemm kernels
  // choose NHWC; training's direct kernels choose blocked layouts, which strides cannot express.
  if (x.dim() != 4 || x.dtype() != DType::Float32 || direct_pass(g, p) != Pass::kInference ||
      g.n * g.o == 0 || g.oh * g.ow == 0 || g.c / g.groups == 0)
    return MemoryFormat::kContiguous;
  ActivationLayouts l{x.is_channels_last(), /*dst_nhwc=*/true};
  if (ep != nullptr) {
    with_bias = with_bias || ep->scale.defined();
    l.sum = ep->residual.defined();
    l.relu = ep->relu;
  }
  if (forward_pass(g, p, with_bias, l) != Pass::kInference) return MemoryFormat::kContiguous;
  return conv_entry(Pass::kInference, g, with_bias, l)->out.needs_reorder()
             ? MemoryFormat::kContiguous
             : MemoryFormat::kChannelsLast;
}

namespace {

// conv_forward_kernel; `publish` as in onednn_conv.
void conv_forward(const ConvGeometry& g, ConvPolicy p, const Tensor& x, const Tensor& w,
                  const Tensor& b, const Tensor& y, bool publish) {
  if (trivial(y, g.c / g.groups)) {
    if (b.defined() && y.numel() > 0)
      copy_into(y, make_view(b, {g.o, 1, 1}, {b.stride(0), 0, 0}, b.storage_offset()));
    return;
  }
  if (y.dtype() != DType::Float64) {
    onednn_conv(Pass::kForward, p, g, x, w, b.defined() ? &b : nullptr, y, nullptr, publish);
    return;
  }
  const Tensor xd = dense(x, DType::Float64), wd = dense(w, DType::Float64);
  const Tensor bd = b.defined() ? dense(b, DType::Float64) : Tensor();
  ref_forward(g, f64(xd), f64(wd), bd.defined() ? f64(bd) : nullptr,
              static_cast<double*>(y.raw_data()));
}

}  // namespace

std::string conv_forward_implementation(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                        bool with_bias) {
  if (x.dtype() == DType::Float64) return "kiln:reference";
  const ActivationLayouts l{x.is_channels_last(),
                            conv_output_format(g, p, x, with_bias) == MemoryFormat::kChannelsLast};
  return conv_entry(forward_pass(g, p, with_bias, l), g, with_bias, l)->implementation;
}

void conv_forward_kernel(const ConvGeometry& g, ConvPolicy p, const Tensor& x, const Tensor& w,
                         const Tensor& b, const Tensor& y) {
  conv_forward(g, p, x, w, b, y, /*publish=*/true);
}

ConvEpilogue fusable_epilogue(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                              const ConvEpilogue& ep) {
  if (x.dtype() != DType::Float32 || g.c / g.groups == 0 || g.n * g.o * g.oh * g.ow == 0) return {};
  ActivationLayouts l{x.is_channels_last(), false, ep.residual.defined(), ep.relu};
  const Pass pass = forward_pass(g, p, ep.scale.defined(), l);
  return conv_entry(pass, g, ep.scale.defined(), l)->reference ? ConvEpilogue{} : ep;
}

void conv_epilogue_forward_kernel(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                  const Tensor& w, const ConvEpilogue& ep, const ConvEpilogue& done,
                                  const Tensor& y) {
  if (y.numel() == 0) return;
  // y is final when the kernel applies all of ep (Note [blocked activations]).
  const bool complete = (!ep.scale.defined() || done.scale.defined()) &&
                        (!ep.residual.defined() || done.residual.defined()) &&
                        (!ep.relu || done.relu);
  if (done.scale.defined() || done.residual.defined() || done.relu)
    onednn_conv(Pass::kForward, p, g, x, w, nullptr, y, &done, complete);
  else
    conv_forward(g, p, x, w, Tensor(), y, complete);
  NoGradGuard no_grad;
  Tensor t = y;
  if (ep.scale.defined() && !done.scale.defined()) t = channel_affine(t, ep.scale, ep.shift);
  if (ep.residual.defined() && !done.residual.defined()) t = add(t, ep.residual);
  if (ep.relu && !done.relu) t = relu(t);
  if (!t.is_same(y)) copy_into(y, t);
}

void conv_backward_data_kernel(const ConvGeometry& g, const Tensor& gy, const Tensor& w,
                               const Tensor& gx) {
  if (trivial(gx, (g.o / g.groups) * g.oh * g.ow)) return;
  if (gx.dtype() != DType::Float64) {
    onednn_conv(Pass::kBackwardData, {}, g, gy, w, nullptr, gx);
    return;
  }
  const Tensor gyd = dense(gy, DType::Float64), wd = dense(w, DType::Float64);
  ref_backward_data(g, f64(gyd), f64(wd), static_cast<double*>(gx.raw_data()));
}

void conv_backward_weights_kernel(const ConvGeometry& g, const Tensor& x, const Tensor& gy,
                                  const Tensor& gw) {
  if (trivial(gw, g.n * g.oh * g.ow)) return;
  if (gw.dtype() != DType::Float64) {
    onednn_conv(Pass::kBackwardWeights, {}, g, x, gy, nullptr, gw);
    return;
  }
  const Tensor xd = dense(x, DType::Float64), gyd = dense(gy, DType::Float64);
  ref_backward_weights(g, f64(xd), f64(gyd), static_cast<double*>(gw.raw_data()));
}

}  // namespace detail
}  // namespace kiln
