// Building and caching the convolutions' oneDNN primitives (Note [conv layouts], Note [conv
// inference kind], Note [conv winograd] in conv_primitives.h), and choosing the forward pass from
// an op's policy.
#include "kiln/backend/onednn/conv_primitives.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "kiln/core/parallel.h"

namespace kiln {
namespace detail {

namespace {

struct ConvDescs {
  dnnl::memory::desc src, wei, bias, dst;
  dnnl::memory::dims strides, dilates, pad_l, pad_r;
};

ConvDescs conv_descs(const ConvGeometry& g, bool with_bias, bool any, ActivationLayouts l,
                     DType dtype) {
  using tag = dnnl::memory::format_tag;
  const auto dt = *dnnl_dtype(dtype);
  const auto bias_dt = dnnl::memory::data_type::f32;
  const auto plain = [&](bool nhwc) {
    if (any) return l.nhwc_kernel ? tag::nhwc : tag::any;
    return nhwc ? tag::nhwc : tag::nchw;
  };
  ConvDescs d;
  d.src = dnnl::memory::desc({g.n, g.c, g.h, g.w}, dt, plain(l.src_nhwc));
  d.dst = dnnl::memory::desc({g.n, g.o, g.oh, g.ow}, dt, plain(l.dst_nhwc));
  d.wei = g.groups == 1 ? dnnl::memory::desc({g.o, g.c, g.kh, g.kw}, dt, any ? tag::any : tag::oihw)
                        : dnnl::memory::desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw},
                                             dt, any ? tag::any : tag::goihw);
  if (with_bias) d.bias = dnnl::memory::desc({g.o}, bias_dt, tag::x);
  d.strides = {g.sh, g.sw};
  d.dilates = {g.dh - 1, g.dw - 1};  // oneDNN counts the gaps: 0 is a dense kernel
  d.pad_l = {g.pt, g.pl};
  d.pad_r = {g.pb, g.pr};
  return d;
}

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

// oneDNN's im2col + GEMM weight gradient on kiln's own layouts (Note [weight-gradient
// accuracy]), when oneDNN has one for this geometry.
std::optional<dnnl::convolution_backward_weights::primitive_desc> gemm_weight_gradient(
    const ConvDescs& plain, const dnnl::primitive_attr& attr) {
  const auto alg = dnnl::algorithm::convolution_direct;
  dnnl::engine& eng = dnnl_engine();
  try {
    const dnnl::convolution_forward::primitive_desc hint(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, plain.src,
                                        plain.wei, plain.dst, plain.strides, plain.dilates,
                                        plain.pad_l, plain.pad_r),
        attr, eng);
    dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(alg, plain.src, plain.wei, plain.dst,
                                                 plain.strides, plain.dilates, plain.pad_l,
                                                 plain.pad_r),
        attr, eng, hint);
    do {
      if (std::string(pd.impl_info_str()).find("gemm") != std::string::npos) return pd;
    } while (pd.next_impl());
  } catch (const dnnl::error&) {
  }
  return std::nullopt;
}

ConvEntry build_conv(Pass pass, const ConvGeometry& g, bool with_bias, ActivationLayouts layouts,
                     DType dtype) {
  const ConvDescs plain = conv_descs(g, with_bias, /*any=*/false, layouts, dtype);
  const ConvDescs d =
      conv_descs(g, with_bias, /*any=*/true, {.nhwc_kernel = layouts.nhwc_kernel}, dtype);
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
    if (std::string(pd.impl_info_str()) == "jit:avx2") {
      if (auto gemm = gemm_weight_gradient(plain, attr)) pd = *gemm;
    }
    e.primitive = dnnl::convolution_backward_weights(pd);
    e.scratch = pd.scratchpad_desc();
    e.a = operand(DNNL_ARG_SRC, plain.src, pd.src_desc(), false);
    e.b = operand(DNNL_ARG_DIFF_DST, plain.dst, pd.diff_dst_desc(), false);
    e.out = operand(DNNL_ARG_DIFF_WEIGHTS, plain.wei, pd.diff_weights_desc(), true);
  }
  return e;
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

}  // namespace

bool is_forward(Pass p) {
  return p == Pass::kForward || p == Pass::kInference || p == Pass::kWinograd;
}

Tensor scratch(const dnnl::memory::desc& desc) {
  return empty({static_cast<int64_t>((desc.get_size() + 3) / 4)}, {DType::Float32});
}

// oneDNN sizes a primitive's scratchpad for the team it was created with, so the team size is
// part of the key.
std::shared_ptr<const ConvEntry> conv_entry(Pass pass, const ConvGeometry& g, bool with_bias,
                                            ActivationLayouts l, DType dtype) {
  std::string key = g.key();
  const int threads = get_num_threads();
  key.append(reinterpret_cast<const char*>(&threads), sizeof(threads));
  key += {static_cast<char>('0' + static_cast<int>(pass)), with_bias ? 'b' : '-', l.key(),
          static_cast<char>('A' + static_cast<int>(dtype))};
  return conv_cache().get_or_create(key, [&] {
    return std::make_shared<const ConvEntry>(build_conv(pass, g, with_bias, l, dtype));
  });
}

Pass direct_pass(const ConvGeometry& g, ConvPolicy p) {
  return p.inference() && g.n == 1 ? Pass::kInference : Pass::kForward;
}

bool prefer_channels_last_training() {
  // Read on every call, so that a test can force either answer on any CPU.
  if (const char* env = std::getenv("KILN_CHANNELS_LAST_TRAINING"); env && *env)
    return std::string(env) != "0";
  static const bool prefer = [] {
    // A ResNet stage's shape: what oneDNN runs there decides.
    const ConvGeometry g{.n = 32,
                         .c = 64,
                         .h = 32,
                         .w = 32,
                         .o = 64,
                         .kh = 3,
                         .kw = 3,
                         .oh = 32,
                         .ow = 32,
                         .pt = 1,
                         .pb = 1,
                         .pl = 1,
                         .pr = 1};
    try {
      const std::string impl =
          conv_entry(Pass::kForward, g, false, {true, true, false, false, true})->implementation;
      return impl.starts_with("brg");
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return prefer;
}

Pass forward_pass(const ConvGeometry& g, ConvPolicy p, bool with_bias, ActivationLayouts l,
                  DType dtype) {
  const Pass pass = requested_pass(g, p);
  // oneDNN's Winograd kernels are float32 only.
  if (pass == Pass::kWinograd &&
      (dtype != DType::Float32 || !conv_entry(pass, g, with_bias, l, dtype)->winograd))
    return direct_pass(g, p);
  return pass;
}

}  // namespace detail
}  // namespace kiln
