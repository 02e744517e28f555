// CPU kernels of quantized_conv2d and quantized_linear (Note [int8 quantization] in
// kiln/ops/quantize.h) on oneDNN's int8 primitives: uint8/int8 activations, int8 weights, an int32
// bias, the per-channel output scales (fixed in each primitive: fixed_scales), relu as a
// post-op, float32 output. The definitions are in kiln/ops/quantize.cpp.
//
// Note [int8 weight cache]: oneDNN's int8 kernels read weights in a blocked layout (with a
// compensation term appended when the activations are signed), so the plain int8 weights are
// reordered once and the copy is kept, keyed like the float32 inference weights (Note [conv weight
// cache]): the storage held weakly, its offset, its version and the layout. A quantized weight
// changes only when a model is re-quantized or loaded, and both bump the version.
//
// Note [int8 without VNNI]: without VNNI, oneDNN multiplies with vpmaddubsw, which adds two
// uint8 x int8 products into a saturating int16: 2 * 255 * 127 = 64770 does not fit. For the
// convolution of int8 activations oneDNN halves the weights itself (its s8s8 compensation path);
// for uint8 activations, and for its int8 matmul with either kind (which shifts int8 activations
// to uint8), it leaves that to the user: on an AVX2 CPU those came out wrong by up to a half. So
// there the kernels halve the weights (round half to even) and the bias and double the output
// scales: 2 * 255 * 64 = 32640 fits, and each product loses at most half a weight step, as
// oneDNN's own halving does. (Seen on AVX2; a CPU with AVX-512 but no VNNI takes the same path
// untested.)
#include <omp.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/backend/cpu/dense.h"
#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/backend/onednn/dnnl_utils.h"
#include "kiln/core/storage.h"
#include "kiln/ops/conv_attrs.h"
#include "kiln/ops/conv_geometry.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Int8Entry {
  dnnl::primitive primitive;
  dnnl::memory::desc src_md, wei_plain_md, wei_md, bias_md, dst_md, scratch_md;
  dnnl::reorder wei_reorder;
  bool wei_needs_reorder = false;
  bool halve = false;  // Note [int8 without VNNI]
};

// Whether the weights are halved here (Note [int8 without VNNI]): a convolution's for uint8
// activations, a matmul's for both kinds.
bool halve_for(dt src_dt, bool matmul) {
  return (matmul || src_dt == dt::u8) && !onednn_exact_int8();
}

// round_half_even(v / 2) for integers: exact halves go to the even neighbour.
template <class T>
T halved(T v) {
  const T q = static_cast<T>(v / 2), r = static_cast<T>(v % 2);
  if (r == 0) return q;
  return (q % 2 == 0) ? q : static_cast<T>(q + (v > 0 ? 1 : -1));
}

template <class T>
Tensor halved_copy(const Tensor& dense_t, DType dtype) {
  Tensor out = empty(dense_t.shape(), {dtype});
  const auto* src = static_cast<const T*>(dense_t.raw_data());
  auto* dst = static_cast<T*>(out.raw_data());
  for (int64_t i = 0; i < dense_t.numel(); ++i) dst[i] = halved(src[i]);
  return out;
}

LruCache<std::shared_ptr<const Int8Entry>>& int8_cache() {
  static auto* cache = new LruCache<std::shared_ptr<const Int8Entry>>(256);
  return *cache;
}

// The output scales per channel (dim 1 of the output), fixed in the primitive (fixed_scales).
dnnl::primitive_attr int8_attr(bool relu, const std::vector<float>& scales) {
  dnnl::primitive_attr attr = user_scratchpad_attr();
  attr.set_output_scales(1 << 1, scales);
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

// The blocked copy of weight w (Note [int8 weight cache]).
class Int8WeightCache {
 public:
  Tensor get(const Tensor& w, const Int8Entry& e) {
    if (!e.wei_needs_reorder && !e.halve) return w;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Entry& x : entries_)
        if (x.offset == w.storage_offset() && x.md == e.wei_md && x.halve == e.halve &&
            x.version == w.version() && x.storage.lock() == w.storage()) {
          x.last_use = ++clock_;
          return x.blocked;
        }
    }
    const Tensor source = e.halve ? halved_copy<int8_t>(w, DType::Int8) : w;
    Tensor blocked = source;
    if (e.wei_needs_reorder) {
      blocked = empty({static_cast<int64_t>(e.wei_md.get_size())}, {DType::UInt8});
      dnnl::engine& eng = dnnl_engine();
      dnnl::memory plain(e.wei_plain_md, eng, source.raw_data()),
          out(e.wei_md, eng, blocked.raw_data());
      e.wei_reorder.execute(dnnl_stream(), plain, out);
      dnnl_stream().wait();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(entries_, [](const Entry& x) {
      auto st = x.storage.lock();
      return !st || st->version() != x.version;
    });
    if (entries_.size() >= 512)
      entries_.erase(
          std::min_element(entries_.begin(), entries_.end(),
                           [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; }));
    entries_.push_back(
        {w.storage(), w.storage_offset(), w.version(), e.wei_md, e.halve, blocked, ++clock_});
    return blocked;
  }

 private:
  struct Entry {
    std::weak_ptr<Storage> storage;
    int64_t offset = 0;
    uint64_t version = 0;
    dnnl::memory::desc md;
    bool halve = false;
    Tensor blocked;
    uint64_t last_use = 0;
  };
  std::mutex mutex_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

Int8WeightCache& int8_weights() {
  static auto* cache = new Int8WeightCache();
  return *cache;
}

// Runs entry e with the given operands: x (dense in e's src layout), w (plain int8), b (int32),
// y (the float32 output); the scales are in the primitive.
void run_int8(const Int8Entry& e, const Tensor& x, const Tensor& w, const Tensor& b,
              const Tensor& y) {
  const Tensor wd = int8_weights().get(detail::dense(w, DType::Int8), e);
  const Tensor bd = e.halve ? halved_copy<int32_t>(detail::dense(b, DType::Int32), DType::Int32)
                            : detail::dense(b, DType::Int32);
  dnnl::engine& eng = dnnl_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(e.src_md, eng, x.raw_data())},
      {DNNL_ARG_WEIGHTS, dnnl::memory(e.wei_md, eng, wd.raw_data())},
      {DNNL_ARG_BIAS, dnnl::memory(e.bias_md, eng, bd.raw_data())},
      {DNNL_ARG_DST, dnnl::memory(e.dst_md, eng, y.raw_data())}};
  const Tensor scratch = scratchpad_for(e.scratch_md);
  if (scratch.defined())
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(e.scratch_md, eng, scratch.raw_data());
  dnnl::stream& st = dnnl_stream();
  e.primitive.execute(st, args);
  st.wait();
}

template <class PD>
void finish_entry(Int8Entry& e, const PD& pd) {
  e.wei_md = pd.weights_desc();
  e.wei_needs_reorder = e.wei_md != e.wei_plain_md;
  if (e.wei_needs_reorder)
    e.wei_reorder = dnnl::reorder(
        dnnl::reorder::primitive_desc(dnnl_engine(), e.wei_plain_md, dnnl_engine(), e.wei_md));
  e.scratch_md = pd.scratchpad_desc();
}

// The output scales s (float32 [O]) as values, also appended to a primitive's key: oneDNN 2.6's
// int8 convolutions take no run-time output scales, and its brgemm int8 matmul only fixed ones
// (with run-time scales it falls back to gemm:jit, 3-4x slower), so the scales are fixed in each
// primitive: one per layer.
std::vector<float> fixed_scales(const Tensor& s, bool halve, std::string& key) {
  const Tensor sd = detail::dense(s, DType::Float32);
  const auto* sp = static_cast<const float*>(sd.raw_data());
  std::vector<float> scales(sp, sp + sd.numel());
  if (halve) {
    for (float& v : scales) v *= 2.0f;  // exact: a power of two
    key += "half|";
  }
  key.append(reinterpret_cast<const char*>(scales.data()), scales.size() * sizeof(float));
  return scales;
}

// --- quantized_conv2d -----------------------------------------------------------------------

std::shared_ptr<const Int8Entry> conv_entry(const detail::ConvGeometry& g, dt src_dt, bool relu,
                                            const std::vector<float>& scales, bool halve) {
  auto e = std::make_shared<Int8Entry>();
  e->halve = halve;
  const int64_t groups = g.groups;
  e->src_md = dnnl::memory::desc({g.n, g.c, g.h, g.w}, src_dt, tag::nhwc);
  e->dst_md = dnnl::memory::desc({g.n, g.o, g.oh, g.ow}, dt::f32, tag::nhwc);
  e->bias_md = dnnl::memory::desc({g.o}, dt::s32, tag::x);
  dnnl::memory::dims wdims =
      groups == 1 ? dnnl::memory::dims{g.o, g.c, g.kh, g.kw}
                  : dnnl::memory::dims{groups, g.o / groups, g.c / groups, g.kh, g.kw};
  e->wei_plain_md = dnnl::memory::desc(wdims, dt::s8, groups == 1 ? tag::oihw : tag::goihw);
  const dnnl::memory::desc wany(wdims, dt::s8, tag::any);
  const dnnl::convolution_forward::desc d(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, e->src_md, wany,
      e->bias_md, e->dst_md, {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.pt, g.pl}, {g.pb, g.pr});
  dnnl::convolution_forward::primitive_desc pd(d, int8_attr(relu, scales), dnnl_engine());
  e->primitive = dnnl::convolution_forward(pd);
  finish_entry(*e, pd);
  return e;
}

void quantized_conv2d_kernel(const Op& op, const std::vector<Tensor>& in,
                             const std::vector<Tensor>& out) {
  const nlohmann::json attrs = op.attrs();
  const Attrs a(op.name(), attrs);
  const Conv2dOptions options = detail::conv_options_from_attrs(a);
  const bool relu = a.b("relu");
  const Tensor &x = in[0], &y = out[0];
  if (y.numel() == 0) return;
  const detail::ConvGeometry g = *detail::conv_geometry(x.shape(), in[1].shape(), options);
  const dt src_dt = x.dtype() == DType::UInt8 ? dt::u8 : dt::s8;
  // oneDNN's int8 kernels read NHWC activations.
  Tensor xd = x;
  if (!x.is_channels_last()) {
    xd = empty(x.shape(), {x.dtype(), x.device(), false, MemoryFormat::kChannelsLast});
    copy_into(xd, x);
  }
  std::string key = "conv|" + g.key() + (src_dt == dt::u8 ? "|u8" : "|s8") +
                    (relu ? "|relu|" : "||") + std::to_string(omp_get_max_threads()) + "|";
  const bool halve = halve_for(src_dt, false);
  const std::vector<float> scales = fixed_scales(in[3], halve, key);
  const auto e =
      int8_cache().get_or_create(key, [&] { return conv_entry(g, src_dt, relu, scales, halve); });
  run_int8(*e, xd, in[1], in[2], y);
}

KILN_REGISTER_KERNEL("quantized_conv2d", DeviceType::CPU, quantized_conv2d_kernel);

// --- quantized_linear -----------------------------------------------------------------------

std::shared_ptr<const Int8Entry> linear_entry(int64_t m, int64_t k, int64_t n, dt src_dt, bool relu,
                                              const std::vector<float>& scales, bool halve) {
  auto e = std::make_shared<Int8Entry>();
  e->halve = halve;
  e->src_md = dnnl::memory::desc({m, k}, src_dt, tag::ab);
  e->dst_md = dnnl::memory::desc({m, n}, dt::f32, tag::ab);
  e->bias_md = dnnl::memory::desc({1, n}, dt::s32, tag::ab);
  // The weight [N, K] read as [K, N].
  e->wei_plain_md = dnnl::memory::desc({k, n}, dt::s8, tag::ba);
  const dnnl::memory::desc wany({k, n}, dt::s8, tag::any);
  const dnnl::matmul::desc d(e->src_md, wany, e->bias_md, e->dst_md);
  dnnl::matmul::primitive_desc pd(d, int8_attr(relu, scales), dnnl_engine());
  e->primitive = dnnl::matmul(pd);
  finish_entry(*e, pd);
  return e;
}

void quantized_linear_kernel(const Op& op, const std::vector<Tensor>& in,
                             const std::vector<Tensor>& out) {
  const nlohmann::json attrs = op.attrs();
  const Attrs a(op.name(), attrs);
  const bool relu = a.b("relu");
  const Tensor &x = in[0], &y = out[0];
  if (y.numel() == 0) return;
  const int64_t k = in[1].dim_size(1), n = in[1].dim_size(0), m = y.numel() / n;
  if (k == 0) {  // an empty sum: relu?(bias * scale)
    const auto* b = static_cast<const int32_t*>(detail::dense(in[2], DType::Int32).raw_data());
    const auto* s = static_cast<const float*>(detail::dense(in[3], DType::Float32).raw_data());
    auto* o = static_cast<float*>(y.raw_data());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        const float v = static_cast<float>(b[j]) * s[j];
        o[r * n + j] = relu && !(v > 0.0f) ? 0.0f : v;
      }
    return;
  }
  const dt src_dt = x.dtype() == DType::UInt8 ? dt::u8 : dt::s8;
  const Tensor xd = detail::dense(x, x.dtype());
  std::string key = "linear|" + std::to_string(m) + "," + std::to_string(k) + "," +
                    std::to_string(n) + (src_dt == dt::u8 ? "|u8" : "|s8") +
                    (relu ? "|relu|" : "||") + std::to_string(omp_get_max_threads()) + "|";
  const bool halve = halve_for(src_dt, true);
  const std::vector<float> scales = fixed_scales(in[3], halve, key);
  const auto e = int8_cache().get_or_create(
      key, [&] { return linear_entry(m, k, n, src_dt, relu, scales, halve); });
  run_int8(*e, xd, in[1], in[2], y);
}

KILN_REGISTER_KERNEL("quantized_linear", DeviceType::CPU, quantized_linear_kernel);

}  // namespace

}  // namespace kiln
