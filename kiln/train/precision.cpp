#include "kiln/train/precision.h"

#include "kiln/core/error.h"

namespace kiln::train {

Precision parse_precision(std::string_view name, const Loc& loc) {
  if (name == "float32" || name == "fp32") return Precision::kFloat32;
  if (name == "bf16" || name == "bfloat16" || name == "mixed_bfloat16") return Precision::kBFloat16;
  if (name == "fp16" || name == "float16" || name == "mixed_float16") return Precision::kFloat16;
  fail("precision", loc,
       "expected float32, bf16 (or bfloat16, mixed_bfloat16) or fp16 (or float16, mixed_float16), "
       "but got '{}'",
       name);
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFloat32:
      return "float32";
    case Precision::kBFloat16:
      return "bf16";
    case Precision::kFloat16:
      return "fp16";
  }
  return "?";
}

const char* precision_policy_name(Precision p) {
  switch (p) {
    case Precision::kFloat32:
      return "float32";
    case Precision::kBFloat16:
      return "mixed_bfloat16";
    case Precision::kFloat16:
      return "mixed_float16";
  }
  return "?";
}

std::optional<DType> precision_compute_dtype(Precision p) {
  switch (p) {
    case Precision::kFloat32:
      return std::nullopt;
    case Precision::kBFloat16:
      return DType::BFloat16;
    case Precision::kFloat16:
      return DType::Float16;
  }
  return std::nullopt;
}

}  // namespace kiln::train
