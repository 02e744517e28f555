// CPU kernel of relu_backward (Note [kernel table]): grad where x > 0, else 0, selected in one
// pass. The definition (infer, vjp) is in kiln/ops/relu_backward.cpp.
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

// infer checked that grad and x share shape and a floating dtype.
void relu_backward_kernel(const Op&, const std::vector<Tensor>& in,
                          const std::vector<Tensor>& out) {
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using C = compute_t<T>;
      map_binary<T, T, T>(in[0], in[1], out[0], [](C g, C x) { return x <= C(0) ? C(0) : g; });
    }
  });
}

KILN_REGISTER_KERNEL("relu_backward", DeviceType::CPU, relu_backward_kernel);

}  // namespace

}  // namespace kiln
