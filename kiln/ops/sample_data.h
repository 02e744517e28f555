#pragma once
// Deterministic sample data, for the op samples of the tests (tests/samples/) and for gradcheck's
// own probe tensors; it stays in the library because gradcheck is public.
#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

// Deterministic float64 sample data: uniform in [low, high), keyed by `seed`.
Tensor sample_tensor(Shape shape, uint64_t seed, double low = -1.0, double high = 1.0);

}  // namespace kiln
