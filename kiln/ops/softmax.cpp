// Fused softmax and log_softmax along one dim, plus their unfused reference decompositions
// (reduce_kernels.h) that tests compare the fused kernels against.
#include "kiln/ops/softmax.h"

#include <cmath>
#include <limits>

#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/reduce_kernels.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

// Each row along `dim` is max-subtracted before exp so that nothing overflows; the sum of
// exponentials accumulates in double in a fixed order. A row holding NaN gives NaN.
template <class T, bool kLog>
void softmax_rows(const Tensor& x, const Tensor& out, int64_t dim) {
  using C = compute_t<T>;
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  int64_t outer = 1, inner = 1;
  const int64_t len = x.dim() == 0 ? 1 : x.shape()[dim];
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) outer *= x.shape()[d];
    if (d > dim) inner *= x.shape()[d];
  }
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(len, 1));
  parallel_for(0, outer * inner, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t start = (r / inner) * len * inner + r % inner;
      const T* p = px + start;
      T* q = po + start;
      C m = -std::numeric_limits<C>::infinity();
      for (int64_t k = 0; k < len; ++k) {
        C v = static_cast<C>(p[k * inner]);
        if (v > m || std::isnan(v)) m = v;
        if (std::isnan(m)) break;
      }
      double s = 0;
      for (int64_t k = 0; k < len; ++k) s += std::exp(static_cast<C>(p[k * inner]) - m);
      if constexpr (kLog) {
        const C log_s = static_cast<C>(std::log(s));
        for (int64_t k = 0; k < len; ++k)
          q[k * inner] = static_cast<T>(static_cast<C>(p[k * inner]) - m - log_s);
      } else {
        for (int64_t k = 0; k < len; ++k)
          q[k * inner] = static_cast<T>(std::exp(static_cast<C>(p[k * inner]) - m) / s);
      }
    }
  });
}

template <bool kLog>
class SoftmaxOp final : public Op {
 public:
  explicit SoftmaxOp(int64_t dim) : dim_(dim) {}
  const char* name() const override { return kLog ? "log_softmax" : "softmax"; }
  nlohmann::json attrs() const override { return {{"dim", dim_}}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    if (!is_floating(x.dtype()))
      fail(name(), loc, "expected a floating-point input, but got {}", x.describe());
    wrap_dim(dim_, x.dim(), name(), loc);
    return {{x.shape(), x.dtype(), x.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    Tensor x = in[0];
    if (!x.is_contiguous()) {
      NoGradGuard no_grad;
      x = contiguous(x);
    }
    const int64_t dim = wrap_dim(dim_, x.dim(), name());
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<compute_t<T>>) softmax_rows<T, kLog>(x, out[0], dim);
    });
  }

  Saves saves() const override { return {false, true}; }

  // softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g), sums along dim.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    const Tensor& y = ctx.outputs[0];
    const Tensor& g = ctx.grads[0];
    const Dims dims{wrap_dim(dim_, y.dim(), name())};
    if constexpr (kLog) return {sub(g, mul(exp(y), sum(g, dims, true)))};
    return {mul(y, sub(g, sum(mul(g, y), dims, true)))};
  }

 private:
  int64_t dim_;
};

template <bool kLog>
OpPtr make_softmax(const Attrs& a) {
  return std::make_shared<const SoftmaxOp<kLog>>(a.i("dim"));
}
KILN_REGISTER_OP("softmax", (OpSchema{{"x"}, {"y"}}), make_softmax<false>);
KILN_REGISTER_OP("log_softmax", (OpSchema{{"x"}, {"y"}}), make_softmax<true>);

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, const Loc& loc) {
  return call_op<SoftmaxOp<false>>({x}, loc, dim);
}

Tensor log_softmax(const Tensor& x, int64_t dim, const Loc& loc) {
  return call_op<SoftmaxOp<true>>({x}, loc, dim);
}

namespace reference {

Tensor softmax(const Tensor& x, int64_t dim, const Loc& loc) {
  return exp(sub(x, logsumexp(x, {dim}, true, loc), loc), loc);
}

Tensor log_softmax(const Tensor& x, int64_t dim, const Loc& loc) {
  return sub(x, logsumexp(x, {dim}, true, loc), loc);
}

}  // namespace reference

}  // namespace kiln
