// The convolution kernels, the entry points the conv ops call: float32 and the 16-bit floats
// (Note [low-precision convolutions]) through one oneDNN runner that takes each operand from the
// right place (the caches, a pending blocked form, or a reorder) and runs the pass; float64 through
// the reference loops. Geometry and checks are in kiln/ops/conv_geometry.cpp, attributes in
// kiln/ops/conv_attrs.cpp; here: primitives in conv_primitives.cpp, caches in
// conv_weight_cache.cpp, deferral in conv_blocked_activation.cpp; the loops in
// kiln/backend/cpu/conv_reference.cpp.
#include "kiln/backend/onednn/conv_kernels.h"

#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kiln/backend/cpu/conv_reference.h"
#include "kiln/backend/cpu/dense.h"
#include "kiln/backend/cpu/loops.h"
#include "kiln/backend/onednn/conv_blocked_activation.h"
#include "kiln/backend/onednn/conv_primitives.h"
#include "kiln/backend/onednn/conv_weight_cache.h"
#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/backend/onednn/dnnl_utils.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace detail {

namespace {

// An activation of dtype dt oneDNN can read as it is: t itself when it has that dtype and is
// contiguous or channels-last, else a copy in t's layout (channels-last stays channels-last).
Tensor dense_activation(const Tensor& t, DType dt) {
  const bool last = t.is_channels_last();
  if ((t.is_contiguous() || last) && t.dtype() == dt) return t;
  Tensor out = empty(t.shape(), {dt, t.device(), false,
                                 last ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous});
  copy_into(out, t);
  return out;
}

// Note [low-precision convolutions]: a bfloat16 convolution (each pass) runs on oneDNN's bfloat16
// kernels where the CPU has them (AVX512-BF16, AMX; onednn_native_low_precision), accumulating
// in float32 with a float32 bias, and rounds its output once. Elsewhere, and for float16 (oneDNN
// 2.6 has no CPU float16 kernels), the operands are converted to float32, which gives the same
// values up to summation order. bfloat16 also gets the inference weight cache, folded epilogues
// (Note [low-precision conv epilogue]), deferred blocked outputs (Note [blocked activations]) and
// the shared blocked grad_output of the two backward passes; Winograd stays float32-only.
DType compute_dtype(const Tensor& out) {
  return out.dtype() == DType::BFloat16 && onednn_native_low_precision(DType::BFloat16)
             ? DType::BFloat16
             : DType::Float32;
}

// Runs one pass on float32 (or bfloat16, Note [low-precision convolutions]) operands; `a` and `b`
// are the pass's two inputs in the order of the kernels below, `bias` the forward's bias (may be
// null), `ep` a forward's epilogue (may be null). For a forward, `pass` is kForward and policy p
// picks the pass that runs (forward_pass); the backward passes ignore p. `publish`: out is the op's
// result, written here and nowhere else (Note [blocked activations]).
void onednn_conv(Pass pass, ConvPolicy p, const ConvGeometry& g, const Tensor& a, const Tensor& b,
                 const Tensor* bias, const Tensor& out, const ConvEpilogue* ep = nullptr,
                 bool publish = false) {
  // The activations among the operands: a and out always, b in the weight gradient.
  const bool weights_pass = pass == Pass::kBackwardWeights;
  const DType cdt = compute_dtype(out);
  const Tensor a32 = dense_activation(a, cdt);
  const Tensor b32 = weights_pass ? dense_activation(b, cdt) : dense(b, cdt);
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
  // Note [channels-last training]: the activation the pass reads decides.
  layouts.nhwc_kernel = a32.is_channels_last() && !(forward && p.inference());
  if (forward) pass = forward_pass(g, p, bias != nullptr, layouts, cdt);
  const std::shared_ptr<const ConvEntry> entry = conv_entry(pass, g, bias != nullptr, layouts, cdt);
  const ConvEntry& e = *entry;
  const bool direct = out.dtype() == cdt;
  const Tensor o32 = direct
                         ? out
                         : empty(out.shape(), {cdt, out.device(), false,
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
      keep.push_back(blocked_weight(b, *op, fold));
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
      keep.push_back(blocked_grad_output(original, *op));
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
    const bool same_plain =
        r.dtype() == cdt && (o32.is_channels_last() ? r.is_channels_last() : r.is_contiguous());
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
  if (defer) defer_blocked_output(out, out_blocked, e.out);
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

}  // namespace

MemoryFormat onednn_conv_output_format(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                       bool with_bias, const ConvEpilogue* ep) {
  // A training forward on channels-last float32 runs the NHWC kernel (Note [channels-last
  // training]).
  if (!p.inference() && x.dim() == 4 && x.dtype() == DType::Float32 && x.is_channels_last())
    return MemoryFormat::kChannelsLast;
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
  const ActivationLayouts l{x.is_channels_last(), onednn_conv_output_format(g, p, x, with_bias) ==
                                                      MemoryFormat::kChannelsLast};
  return conv_entry(forward_pass(g, p, with_bias, l), g, with_bias, l)->implementation;
}

void conv_forward_kernel(const ConvGeometry& g, ConvPolicy p, const Tensor& x, const Tensor& w,
                         const Tensor& b, const Tensor& y) {
  conv_forward(g, p, x, w, b, y, /*publish=*/true);
}

ConvEpilogue onednn_fusable_epilogue(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                     const ConvEpilogue& ep) {
  // Note [low-precision conv epilogue]: bfloat16 where its kernels are native; a float16
  // convolution computes in float32 and is composed.
  const DType dt = x.dtype();
  const bool native = dt == DType::Float32 ||
                      (dt == DType::BFloat16 && onednn_native_low_precision(DType::BFloat16));
  if (!native || g.c / g.groups == 0 || g.n * g.o * g.oh * g.ow == 0) return {};
  ActivationLayouts l{x.is_channels_last(), false, ep.residual.defined(), ep.relu};
  const Pass pass = forward_pass(g, p, ep.scale.defined(), l, dt);
  return conv_entry(pass, g, ep.scale.defined(), l, dt)->reference ? ConvEpilogue{} : ep;
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
  if (complete) return;
  // The rest as composed() computes it: in float32 for 16-bit outputs (Note [low-precision conv
  // epilogue]), rounded once by the copy back.
  NoGradGuard no_grad;
  const bool low = is_low_precision(y.dtype());
  Tensor t = low ? to_dtype(y, DType::Float32) : y;
  if (ep.scale.defined() && !done.scale.defined()) t = channel_affine(t, ep.scale, ep.shift);
  if (ep.residual.defined() && !done.residual.defined())
    t = add(t, low ? to_dtype(ep.residual, DType::Float32) : ep.residual);
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
