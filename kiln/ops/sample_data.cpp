#include "kiln/ops/sample_data.h"

namespace kiln {

namespace {

// SplitMix64: a tiny well-mixed hash, enough for reproducible sample data.
uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Tensor sample_tensor(Shape shape, uint64_t seed, double low, double high) {
  Tensor t = empty(std::move(shape), {DType::Float64});
  double* p = t.data<double>();
  uint64_t state = seed * 0x2545f4914f6cdd1dull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double u = static_cast<double>(splitmix(state) >> 11) * 0x1.0p-53;
    p[i] = low + (high - low) * u;
  }
  return t;
}

}  // namespace kiln
