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
  // a > b is false when b is NaN, so this returns b then; branch-free, so loops vectorize.
  return (std::isnan(a) | (a > b)) ? a : b;
}

// Note [vectorized updates]: elements are independent (each loop reads and writes element i of
// its tensors only), so the loop is vectorized. A flag that only selects arithmetic is a uniform
// branch, which the vectorizer turns into a select; a flag that guards loads or stores (a state
// tensor that may be absent) is made a compile-time constant with with_flag, since a vectorizer
// cannot select memory accesses. Vector sqrt, division and fma round as the scalar ones do, so
// the results are those of the scalar loop, bit for bit.
// f(begin, end) over chunks of [0, n), split across threads: the loop over a chunk is the
// caller's, written with `#pragma omp simd` where it vectorizes.
template <class F>
void for_each_chunk(int64_t n, F f) {
  parallel_for(0, n, 32768, f);
}

template <class F>
void for_each_element(int64_t n, F f) {
  for_each_chunk(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

// f(std::true_type{}) or f(std::false_type{}), as flag says.
template <class F>
void with_flag(bool flag, F&& f) {
  if (flag)
    f(std::true_type{});
  else
    f(std::false_type{});
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
