#include "kiln/core/half.h"

#include <immintrin.h>

namespace kiln {

// F16C is part of the AVX2 baseline kiln is compiled for; it rounds to nearest even exactly as
// IEEE 754 requires, including subnormals, infinities and NaN.
uint16_t Half::from_float(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

float Half::to_float(uint16_t h) {
  return _cvtsh_ss(h);
}

}  // namespace kiln
