// fused_linear's CPU kernel (Note [kernel table]): in float32, one oneDNN matmul of the input's
// rows [M, K] with the weight read transposed in place ([N, K] as [K, N] with strides {1, K}),
// the bias and the activation applied as the matmul's post-ops while each output tile is still in
// cache; other dtypes compute the chain with kiln's ops. The definition is
// kiln/ops/fused_linear.cpp.
#include <omp.h>

#include <string>
#include <unordered_map>

#include "kiln/backend/cpu/dense.h"
#include "kiln/backend/onednn/dnnl_utils.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/fused_linear.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

struct FusedLinearEntry {
  dnnl::matmul primitive;
  dnnl::memory::desc x_md, w_md, b_md, y_md, scratch_md;
};

LruCache<FusedLinearEntry>& fused_linear_cache() {
  static auto* cache = new LruCache<FusedLinearEntry>(128);
  return *cache;
}

FusedLinearEntry build(int64_t m, int64_t k, int64_t n, bool bias, bool relu) {
  using dt = dnnl::memory::data_type;
  FusedLinearEntry e;
  e.x_md = dnnl::memory::desc({m, k}, dt::f32, dnnl::memory::dims{k, 1});
  e.w_md = dnnl::memory::desc({k, n}, dt::f32, dnnl::memory::dims{1, k});
  e.y_md = dnnl::memory::desc({m, n}, dt::f32, dnnl::memory::dims{n, 1});
  if (bias) e.b_md = dnnl::memory::desc({1, n}, dt::f32, dnnl::memory::dims{n, 1});
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc d = bias ? dnnl::matmul::desc(e.x_md, e.w_md, e.b_md, e.y_md)
                                    : dnnl::matmul::desc(e.x_md, e.w_md, e.y_md);
  dnnl::matmul::primitive_desc pd(d, attr, dnnl_engine());
  e.primitive = dnnl::matmul(pd);
  e.scratch_md = pd.scratchpad_desc();
  return e;
}

void fused_linear_kernel(const Op& op, const std::vector<Tensor>& in,
                         const std::vector<Tensor>& out) {
  const nlohmann::json attrs = op.attrs();  // Attrs reads it in place
  const Attrs a(op.name(), attrs);
  const bool has_bias = a.b("has_bias"), relu = a.s("activation") == "relu";
  const Tensor &x = in[0], &w = in[1], &y = out[0];
  if (y.numel() == 0) return;
  const int64_t k = w.dim_size(1), n = w.dim_size(0), m = y.numel() / n;
  if (x.dtype() != DType::Float32 || k == 0) {
    // The chain itself: kiln's matmul, add and relu.
    Tensor r = matmul(x, transpose(w, 0, 1));
    if (has_bias) r = add(r, in[2]);
    if (relu) r = kiln::relu(r);
    copy_into(y, r);
    return;
  }
  const Tensor xd = detail::dense(x, DType::Float32), wd = detail::dense(w, DType::Float32);
  Tensor bd;
  if (has_bias) bd = detail::dense(in[2].numel() == 1 ? expand(in[2], {n}) : in[2], DType::Float32);
  const std::string key = std::to_string(m) + "," + std::to_string(k) + "," + std::to_string(n) +
                          (has_bias ? ",b" : ",") + (relu ? ",relu|" : ",|") +
                          std::to_string(omp_get_max_threads());
  const FusedLinearEntry e =
      fused_linear_cache().get_or_create(key, [&] { return build(m, k, n, has_bias, relu); });
  dnnl::engine& eng = dnnl_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(e.x_md, eng, xd.raw_data())},
      {DNNL_ARG_WEIGHTS, dnnl::memory(e.w_md, eng, wd.raw_data())},
      {DNNL_ARG_DST, dnnl::memory(e.y_md, eng, y.raw_data())}};
  if (has_bias) args[DNNL_ARG_BIAS] = dnnl::memory(e.b_md, eng, bd.raw_data());
  const Tensor scratch = scratchpad_for(e.scratch_md);
  if (scratch.defined())
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(e.scratch_md, eng, scratch.raw_data());
  dnnl::stream& s = dnnl_stream();
  e.primitive.execute(s, args);
  s.wait();
}

KILN_REGISTER_KERNEL("fused_linear", DeviceType::CPU, fused_linear_kernel);

}  // namespace

}  // namespace kiln
