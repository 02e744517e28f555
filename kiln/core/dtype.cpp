#include "kiln/core/dtype.h"

#include <algorithm>

namespace kiln {

size_t itemsize(DType dt) {
  switch (dt) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
      return 1;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::Float64:
      return 8;
  }
  return 0;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType dt : kAllDTypes)
    if (name == dtype_name(dt)) return dt;
  return std::nullopt;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::Bool:
      return "bool";
    case DType::UInt8:
      return "uint8";
    case DType::Int8:
      return "int8";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
  }
  return "?";
}

bool is_floating(DType dt) {
  return dt >= DType::Float16;
}

bool is_integral(DType dt, bool include_bool) {
  if (dt == DType::Bool) return include_bool;
  return dt < DType::Float16;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // float16 with bfloat16: neither holds the other, PyTorch gives float32.
  if ((a == DType::Float16 && b == DType::BFloat16) ||
      (a == DType::BFloat16 && b == DType::Float16))
    return DType::Float32;
  // uint8 with int8: PyTorch gives int16, which kiln lacks; int32 holds both.
  if ((a == DType::UInt8 && b == DType::Int8) || (a == DType::Int8 && b == DType::UInt8))
    return DType::Int32;
  // An integer with a 16-bit float keeps the float (PyTorch: int64 + float16 -> float16).
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  return std::max(a, b);
}

}  // namespace kiln
