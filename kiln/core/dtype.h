#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "kiln/core/half.h"

namespace kiln {

// Ordered from the lowest to the highest promotion category so that promotion is mostly a max().
enum class DType : uint8_t { Bool, UInt8, Int8, Int32, Int64, Float16, BFloat16, Float32, Float64 };

inline constexpr DType kAllDTypes[] = {DType::Bool,     DType::UInt8,   DType::Int8,
                                       DType::Int32,    DType::Int64,   DType::Float16,
                                       DType::BFloat16, DType::Float32, DType::Float64};

size_t itemsize(DType dt);
const char* dtype_name(DType dt);
// The dtype dtype_name() calls `name` ("float32"); nullopt for any other text.
std::optional<DType> dtype_from_name(std::string_view name);
bool is_floating(DType dt);
// The 16-bit floats (bfloat16, float16): reduced precision, computed with float32 accumulation.
inline bool is_low_precision(DType dt) {
  return dt == DType::BFloat16 || dt == DType::Float16;
}
bool is_integral(DType dt, bool include_bool = false);
// PyTorch's promotion of two dtypes of the same priority (see ops/type_promotion.h for the full
// rule with zero-dim tensors and wrapped scalars). kiln has no int16, so uint8 + int8 gives int32
// where PyTorch gives int16.
DType promote_types(DType a, DType b);

template <class T>
struct TypeTag {
  using type = T;
};

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, bool>)
    return DType::Bool;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::UInt8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return DType::Int8;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::Int64;
  else if constexpr (std::is_same_v<T, Half>)
    return DType::Float16;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return DType::BFloat16;
  else if constexpr (std::is_same_v<T, float>)
    return DType::Float32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::Float64;
  else
    static_assert(sizeof(T) == 0, "not a kiln dtype");
}

// Calls f(TypeTag<T>{}) with the C++ type of dt. Use: visit_dtype(dt, [&](auto tag) {
//   using T = typename decltype(tag)::type; ... });
template <class F>
decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::Bool:
      return f(TypeTag<bool>{});
    case DType::UInt8:
      return f(TypeTag<uint8_t>{});
    case DType::Int8:
      return f(TypeTag<int8_t>{});
    case DType::Int32:
      return f(TypeTag<int32_t>{});
    case DType::Int64:
      return f(TypeTag<int64_t>{});
    case DType::Float16:
      return f(TypeTag<Half>{});
    case DType::BFloat16:
      return f(TypeTag<BFloat16>{});
    case DType::Float32:
      return f(TypeTag<float>{});
    case DType::Float64:
      return f(TypeTag<double>{});
  }
  return f(TypeTag<float>{});
}

// Types that kernels compute in: 16-bit floats are widened to float32.
template <class T>
using compute_t =
    std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

}  // namespace kiln
