#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

// One sample (or, after collation, one batch). `target` may be undefined.
struct Example {
  Tensor data;
  Tensor target;
};

// Note [sample randomness]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Random augmentation never uses a shared generator: that would make a sample's crop depend on
// which worker produced it and in what order. Instead every draw is a pure function of
// (seed, epoch, index, stream): Philox with key = mix(seed, stream) and counter =
// (index, epoch). `stream` tells apart the random stages of a Compose (stage i uses stream i),
// so a crop and a flip of the same sample do not share bits.
struct SampleContext {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  int64_t index = 0;
  uint64_t stream = 0;
};

// The 128 random bits of (ctx, block); block lets a transform draw more than four words.
std::array<uint32_t, 4> sample_bits(const SampleContext& ctx, uint32_t block = 0);
// An integer in [0, n) from one 32-bit word (multiply-shift; n must be in [1, 2^32]).
int64_t bounded_int(uint32_t word, uint64_t n);
// A float in [0, 1) from one 32-bit word (same map as the uniform fills).
double uniform01(uint32_t word);

// A transform of a sample's data tensor.
using TensorTransform = std::function<Tensor(const Tensor&, const SampleContext&)>;

// uint8 (or any dtype) -> float32 divided by 255.
struct ToFloat {
  Tensor operator()(const Tensor& x, const SampleContext& ctx) const;
};

// (x - mean[c]) / std[c] over channel dim -3 of a [..., C, H, W] tensor; one value broadcasts
// to every channel.
class Normalize {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std, const Loc& loc = Loc::current());
  Tensor operator()(const Tensor& x, const SampleContext& ctx) const;

 private:
  std::vector<double> mean_;
  std::vector<double> std_;
};

// Zero-pads the last two dims by `padding` on every side, then crops a size x size window at a
// position drawn uniformly from the sample's stream.
class RandomCrop {
 public:
  explicit RandomCrop(int64_t size, int64_t padding = 0, const Loc& loc = Loc::current());
  Tensor operator()(const Tensor& x, const SampleContext& ctx) const;

 private:
  int64_t size_;
  int64_t padding_;
};

// Reverses the last dim with probability p.
class RandomHorizontalFlip {
 public:
  explicit RandomHorizontalFlip(double p = 0.5, const Loc& loc = Loc::current());
  Tensor operator()(const Tensor& x, const SampleContext& ctx) const;

 private:
  double p_;
};

// Applies transforms in order; stage i sees ctx with stream = ctx.stream * 64 + i + 1 so nested
// and sibling stages draw independent bits.
class Compose {
 public:
  explicit Compose(std::vector<TensorTransform> stages) : stages_(std::move(stages)) {}
  Tensor operator()(const Tensor& x, const SampleContext& ctx) const;

 private:
  std::vector<TensorTransform> stages_;
};

}  // namespace kiln::data
