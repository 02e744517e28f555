#include "kiln/core/memory_format.h"

#include <algorithm>

namespace kiln {

Strides channels_last_strides(const Shape& s) {
  const int64_t c = std::max<int64_t>(s[1], 1), w = std::max<int64_t>(s[3], 1);
  const int64_t h = std::max<int64_t>(s[2], 1);
  return {h * w * c, 1, w * c, c};
}

bool is_channels_last(const Shape& shape, const Strides& strides) {
  if (shape.size() != 4) return false;
  // Computed in place (no vectors): every convolution call asks several times.
  const int64_t c = std::max<int64_t>(shape[1], 1), h = std::max<int64_t>(shape[2], 1);
  const int64_t w = std::max<int64_t>(shape[3], 1);
  const int64_t last[4] = {h * w * c, 1, w * c, c}, plain[4] = {c * h * w, h * w, w, 1};
  bool matches_last = true, matches_plain = true;
  for (size_t d = 0; d < 4; ++d) {
    if (shape[d] == 1) continue;
    matches_last = matches_last && strides[d] == last[d];
    matches_plain = matches_plain && strides[d] == plain[d];
  }
  return matches_last && !matches_plain;
}

}  // namespace kiln
