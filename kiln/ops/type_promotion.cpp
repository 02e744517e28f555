#include "kiln/ops/type_promotion.h"

#include <optional>

namespace kiln {

namespace {
int category(DType dt) {
  if (dt == DType::Bool) return 0;
  return is_floating(dt) ? 2 : 1;
}

void fold(std::optional<DType>& acc, DType dt) {
  acc = acc ? promote_types(*acc, dt) : dt;
}
}  // namespace

DType result_type(const std::vector<Tensor>& operands) {
  std::optional<DType> dimensioned, zero_dim, wrapped;
  for (const Tensor& t : operands) {
    if (t.impl()->is_wrapped_number_) {
      // A scalar contributes its kind's default dtype, not its storage dtype.
      DType d = t.dtype() == DType::Bool ? DType::Bool
                : is_floating(t.dtype()) ? DType::Float32
                                         : DType::Int64;
      fold(wrapped, d);
    } else if (t.dim() == 0) {
      fold(zero_dim, t.dtype());
    } else {
      fold(dimensioned, t.dtype());
    }
  }
  std::optional<DType> result = dimensioned;
  for (auto lower : {zero_dim, wrapped}) {
    if (!lower) continue;
    if (!result) {
      result = lower;
    } else if (category(*lower) > category(*result)) {
      // e.g. int tensor + 2.5 -> float32 (the default float), int tensor + float64 0-dim -> float64
      result = (lower == wrapped && category(*lower) == 2) ? DType::Float32 : *lower;
    }
  }
  return result.value_or(DType::Float32);
}

}  // namespace kiln
