// The CPU kernel of conv_bn_fold (Note [conv-bn fold] in kiln/ops/conv_bn_fold.h; Note [kernel
// table]): scale and shift of [C] vectors, computed in float64 and rounded once to the output
// dtype. The definition (attributes, infer, vjp) is in kiln/ops/conv_bn_fold.cpp.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kiln/ops/conv_ops.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

void conv_bn_fold_kernel(const Op& op, const std::vector<Tensor>& in,
                         const std::vector<Tensor>& out) {
  const detail::ConvBnFoldAttrs& a = detail::conv_bn_fold_attrs(op);
  const std::vector<double> mean = in[0].to_vector<double>(), var = in[1].to_vector<double>();
  size_t next = 2;
  auto optional = [&](bool has) {
    return has ? in[next++].to_vector<double>() : std::vector<double>();
  };
  const std::vector<double> w = optional(a.has_weight), b = optional(a.has_bias),
                            cb = optional(a.has_conv_bias);
  visit_dtype(out[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      T* scale = static_cast<T*>(out[0].raw_data());
      T* shift = static_cast<T*>(out[1].raw_data());
      for (size_t c = 0; c < mean.size(); ++c) {
        const double s = (w.empty() ? 1.0 : w[c]) / std::sqrt(var[c] + a.eps);
        const double h = (b.empty() ? 0.0 : b[c]) + ((cb.empty() ? 0.0 : cb[c]) - mean[c]) * s;
        scale[c] = static_cast<T>(static_cast<compute_t<T>>(s));
        shift[c] = static_cast<T>(static_cast<compute_t<T>>(h));
      }
    }
  });
}

KILN_REGISTER_KERNEL("conv_bn_fold", DeviceType::CPU, conv_bn_fold_kernel);

}  // namespace

}  // namespace kiln
