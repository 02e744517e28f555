// CPU kernel of the fused cross_entropy op (Note [kernel table], Note [fused cross entropy]): one
// pass per position computes log-softmax and the loss. The definition (attributes, infer, vjp),
// nll_loss and the reference decomposition are in kiln/ops/loss_classification.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/loss_ops.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

using detail::ClassLayout;

// Per position (row along the class dim): loss_p = -sum_c w_c z_pc log_softmax(x)_pc with z the
// (smoothed) target distribution, and the weight that position adds to Mean's normalizer. The
// rows run in parallel into separate slots; the caller sums the slots in a fixed order.
template <class T>
void cross_entropy_rows(const Tensor& x, const Tensor& target, const std::vector<double>& w,
                        const ClassLayout& cl, int64_t ignore_index, double eps,
                        std::vector<double>& loss, std::vector<double>& norm) {
  using C = compute_t<T>;
  const T* px = static_cast<const T*>(x.raw_data());
  const int64_t classes = cl.classes;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < cl.class_dim) outer *= x.dim_size(d);
    if (d > cl.class_dim) inner *= x.dim_size(d);
  }
  auto read = [](const auto* p, int64_t k) { return static_cast<double>(static_cast<C>(p[k])); };
  const double uniform = classes > 0 ? eps / static_cast<double>(classes) : 0.0;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(classes, 1));
  parallel_for(0, outer * inner, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t start = (p / inner) * classes * inner + p % inner;
      const T* row = px + start;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < classes; ++c) {
        const double v = read(row, c * inner);
        if (v > m || std::isnan(v)) m = v;
        if (std::isnan(m)) break;
      }
      double s = 0;
      for (int64_t c = 0; c < classes; ++c) s += std::exp(read(row, c * inner) - m);
      const double lse = m + std::log(s);
      if (cl.probs) {
        const T* trow = static_cast<const T*>(target.raw_data()) + start;
        double acc = 0;
        for (int64_t c = 0; c < classes; ++c) {
          const double z = read(trow, c * inner) * (1 - eps) + uniform;
          acc -= w[c] * z * (read(row, c * inner) - lse);
        }
        loss[p] = acc;
        norm[p] = 1;
        continue;
      }
      const int64_t t = static_cast<const int64_t*>(target.raw_data())[p];
      if (t == ignore_index) {
        loss[p] = norm[p] = 0;
        continue;
      }
      double acc = -(1 - eps) * w[t] * (read(row, t * inner) - lse);
      if (eps > 0)
        for (int64_t c = 0; c < classes; ++c) acc -= uniform * w[c] * (read(row, c * inner) - lse);
      loss[p] = acc;
      norm[p] = w[t];
    }
  });
}

void cross_entropy_kernel(const Op& op, const std::vector<Tensor>& in,
                          const std::vector<Tensor>& out) {
  const detail::CrossEntropyAttrs& a = detail::cross_entropy_attrs(op);
  Tensor x = in[0], target = in[1];
  {
    NoGradGuard no_grad;
    x = contiguous(x);
    target = contiguous(target);
  }
  const ClassLayout cl = detail::cross_entropy_layout(op, x, target);
  if (!cl.probs)
    detail::check_target_values(op.name(), target, cl.classes, a.ignore_index, x,
                                kernel_call_site());
  std::vector<double> w(static_cast<size_t>(cl.classes), 1.0);
  if (in.size() > 2) w = in[2].to_vector<double>();
  const int64_t positions = shape_numel(cl.loss_shape);
  std::vector<double> loss(static_cast<size_t>(positions)), norm(loss.size());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      cross_entropy_rows<T>(x, target, w, cl, a.ignore_index, a.label_smoothing, loss, norm);
      T* po = static_cast<T*>(out[0].raw_data());
      if (a.reduction == Reduction::None) {
        for (int64_t p = 0; p < positions; ++p) po[p] = static_cast<T>(loss[p]);
        return;
      }
      double total = 0, denom = 0;
      for (int64_t p = 0; p < positions; ++p) {
        total += loss[p];
        denom += norm[p];
      }
      // Mean over nothing (all ignored, or no positions) is 0 / 0 = NaN, as in PyTorch.
      *po = static_cast<T>(a.reduction == Reduction::Mean ? total / denom : total);
    }
  });
}

KILN_REGISTER_KERNEL("cross_entropy", DeviceType::CPU, cross_entropy_kernel);

}  // namespace

}  // namespace kiln
