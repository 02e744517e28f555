#pragma once
// The helpers of the optimizers' fused update loops (kiln/backend/cpu/optimizer_update_ops.cpp;
// the update ops' definition is kiln/ops/optimizer_update.cpp).
//
// Note [optimizer parity]: each update is one loop over the elements that performs, element by
// element, the same sequence of floating-point operations as PyTorch 1.13's single-tensor
// implementation (torch/optim/*.py, `_single_tensor_*`), in the tensor's dtype:
//   - a Python float becomes the tensor's compute type before use ((float)(1 - beta1)), while
//     scalar-only arithmetic (bias corrections, step sizes) stays in double, as in Python;
//   - `add(b, alpha=a)` is a fused multiply-add (ATen vectorizes it as vec::fmadd), so it is
//     std::fma here; addcmul/addcdiv are `self + value * t1 * t2` and `self + value * t1 / t2`;
//   - every PyTorch op rounds its result to the tensor's dtype: round_to<T> does the same for
//     16-bit floats (a no-op for float and double).
// So results agree with PyTorch's to within a few ulps after many steps (test_optim_parity.cpp
// measures it), not just to a tolerance, and no temporary tensor is allocated per step.
#include <cmath>
#include <string>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"

namespace kiln::detail {

template <class T, class C>
inline C round_to(C x) {
  if constexpr (std::is_same_v<T, C>)
    return x;
  else
    return static_cast<C>(static_cast<T>(x));
}

// torch.maximum: NaN wins.
template <class C>
inline C nan_max(C a, C b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return a > b ? a : b;
}

template <class F>
void for_each_element(int64_t n, F f) {
  parallel_for(0, n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

// Calls f(TypeTag<T>{}) for the floating dtypes (the only ones a parameter that requires grad can
// have).
template <class F>
void visit_floating(DType dt, F&& f) {
  switch (dt) {
    case DType::Float16:
      return f(TypeTag<Half>{});
    case DType::BFloat16:
      return f(TypeTag<BFloat16>{});
    case DType::Float32:
      return f(TypeTag<float>{});
    case DType::Float64:
      return f(TypeTag<double>{});
    default:
      throw InternalError(std::string("optimizer update on a non-floating dtype ") +
                          dtype_name(dt));
  }
}

template <class T>
T* data_of(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace kiln::detail
