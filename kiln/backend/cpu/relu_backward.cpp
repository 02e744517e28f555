// CPU kernel of relu_backward (Note [kernel table]): grad where x > 0, else 0, selected in one
// pass. The definition (infer, vjp) is in kiln/ops/relu_backward.cpp.
#include <type_traits>

#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/elementwise_tile.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

template <class C>
C relu_backward_of(C g, C x) {
  return x <= C(0) ? C(0) : g;
}

// infer checked that grad and x share shape and a floating dtype.
void relu_backward_kernel(const Op&, const std::vector<Tensor>& in,
                          const std::vector<Tensor>& out) {
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using C = compute_t<T>;
      map_binary<T, T, T>(in[0], in[1], out[0], [](C g, C x) { return relu_backward_of(g, x); });
    }
  });
}

// The same selection over a block, for fused_elementwise (Note [elementwise tiles]).
template <class C>
TileFn<C> relu_backward_tile_fn() {
  return [](const C* const* args, C* out, int64_t n) {
    const C* g = args[0];
    const C* x = args[1];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = relu_backward_of(g[i], x[i]);
  };
}
ElementwiseTile relu_backward_tile(const Op&) {
  return {2, relu_backward_tile_fn<float>(), relu_backward_tile_fn<double>()};
}

KILN_REGISTER_KERNEL("relu_backward", DeviceType::CPU, relu_backward_kernel);
KILN_REGISTER_ELEMENTWISE_TILE("relu_backward", DeviceType::CPU, relu_backward_tile);

}  // namespace

}  // namespace kiln
