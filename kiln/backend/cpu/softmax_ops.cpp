// CPU kernel of softmax and log_softmax (Note [kernel table]): one pass per row along the dim.
// The definitions (attributes, infer, vjp) and the reference decompositions are in
// kiln/ops/softmax.cpp.
#include <cmath>
#include <limits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax_ops.h"

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
void softmax_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  Tensor x = in[0];
  if (!x.is_contiguous()) {
    NoGradGuard no_grad;
    x = contiguous(x);
  }
  const int64_t dim = wrap_dim(detail::softmax_attrs(op).dim, x.dim(), op.name());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) softmax_rows<T, kLog>(x, out[0], dim);
  });
}

KILN_REGISTER_KERNEL("softmax", DeviceType::CPU, softmax_kernel<false>);
KILN_REGISTER_KERNEL("log_softmax", DeviceType::CPU, softmax_kernel<true>);

}  // namespace

}  // namespace kiln
