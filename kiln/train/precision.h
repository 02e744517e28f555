#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "kiln/core/tensor.h"

namespace kiln::train {

// Note [training precision]: what Keras calls a dtype policy, for the Trainer and `kiln train
// --precision`: variables (parameters, optimizer state) always float32; the compute dtype of the
// forward pass and the loss is float32, or bfloat16 / float16 under autocast (Note [autocast]).
// float16 training adds dynamic loss scaling (Note [grad scaler]); bfloat16 has float32's range
// and needs none.
enum class Precision { kFloat32, kBFloat16, kFloat16 };

// "float32"; "bf16", "bfloat16", "mixed_bfloat16"; "fp16", "float16", "mixed_float16" (Keras'
// policy names are aliases). Anything else is an error listing the accepted names.
Precision parse_precision(std::string_view name, const Loc& loc = Loc::current());
// "float32", "bf16", "fp16".
const char* precision_name(Precision p);
// Keras' policy name: "float32", "mixed_bfloat16", "mixed_float16".
const char* precision_policy_name(Precision p);
// The autocast dtype (nullopt for float32).
std::optional<DType> precision_compute_dtype(Precision p);

}  // namespace kiln::train
