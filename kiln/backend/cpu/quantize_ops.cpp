// CPU kernel of quantize_per_tensor (Note [int8 quantization] in kiln/ops/quantize.h): one pass,
// float32 arithmetic, round half to even (the default rounding mode, what oneDNN's reorders and
// `vcvtps2dq` do), saturation. The definition is in kiln/ops/quantize.cpp.
#include <cmath>
#include <cstdint>

#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

template <class Q>
struct QuantizeTo {
  float inv_scale, lo, hi;
  Q operator()(float x) const {
    float r = std::nearbyint(x * inv_scale);
    r = r == r ? r : 0.0f;  // NaN
    r = r < lo ? lo : r;
    r = r > hi ? hi : r;
    return static_cast<Q>(r);
  }
};

void quantize_per_tensor_kernel(const Op& op, const std::vector<Tensor>& in,
                                const std::vector<Tensor>& out) {
  const nlohmann::json attrs = op.attrs();
  const Attrs a(op.name(), attrs);
  const float inv_scale = static_cast<float>(1.0 / a.f("scale"));
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  auto run = [&](auto q_tag, float lo, float hi) {
    using Q = decltype(q_tag);
    const QuantizeTo<Q> f{inv_scale, lo, hi};
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<compute_t<T>>)
        map_unary<T, Q>(x, y, [f](compute_t<T> v) { return f(static_cast<float>(v)); });
    });
  };
  if (y.dtype() == DType::UInt8)
    run(uint8_t{}, 0.0f, 255.0f);
  else
    run(int8_t{}, -127.0f, 127.0f);
}

KILN_REGISTER_KERNEL("quantize_per_tensor", DeviceType::CPU, quantize_per_tensor_kernel);

}  // namespace

}  // namespace kiln
