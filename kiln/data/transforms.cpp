#include "kiln/data/transforms.h"

#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/rng.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/pad.h"

namespace kiln::data {
namespace {

// SplitMix64 finalizer: spreads (seed, stream) over the whole key so that nearby seeds and
// streams give unrelated Philox keys.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void check_image(const char* op, const Tensor& x, const Loc& loc) {
  if (x.dim() < 2)
    fail(op, loc, "expected an image tensor of rank >= 2 ([..., H, W]), but got {}", x.describe());
}

}  // namespace

std::array<uint32_t, 4> sample_bits(const SampleContext& ctx, uint32_t block) {
  uint64_t key = mix64(ctx.seed ^ mix64(ctx.stream * 4 + block));
  auto index = static_cast<uint64_t>(ctx.index);
  return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                        static_cast<uint32_t>(ctx.epoch), static_cast<uint32_t>(ctx.epoch >> 32)},
                       {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
}

int64_t bounded_int(uint32_t word, uint64_t n) {
  return static_cast<int64_t>((static_cast<uint64_t>(word) * n) >> 32);
}

double uniform01(uint32_t word) {
  return detail::uniform01_float(word);
}

Tensor ToFloat::operator()(const Tensor& x, const SampleContext&) const {
  return div(x.to(DType::Float32), 255.0);
}

Normalize::Normalize(std::vector<double> mean, std::vector<double> std, const Loc& loc)
    : mean_(std::move(mean)), std_(std::move(std)) {
  if (mean_.empty() || mean_.size() != std_.size())
    fail("Normalize", loc, "expected mean and std of the same non-zero length, but got {} and {}",
         mean_.size(), std_.size());
  for (double s : std_)
    if (!(s != 0.0)) fail("Normalize", loc, "expected non-zero std values, but got {}", s);
}

Tensor Normalize::operator()(const Tensor& x, const SampleContext&) const {
  auto channels = static_cast<int64_t>(mean_.size());
  if (x.dim() < 3 || (channels != 1 && x.size(-3) != channels))
    fail("Normalize", Loc::current(),
         "expected a [..., C, H, W] tensor with C = {} channels, but got {}", channels,
         x.describe());
  DType dt = is_floating(x.dtype()) ? x.dtype() : DType::Float32;
  Tensor mean = tensor<double>(mean_, Shape{channels, 1, 1}).to(dt);
  Tensor std = tensor<double>(std_, Shape{channels, 1, 1}).to(dt);
  return div(sub(x.to(dt), mean), std);
}

RandomCrop::RandomCrop(int64_t size, int64_t padding, const Loc& loc)
    : size_(size), padding_(padding) {
  if (size <= 0 || padding < 0)
    fail("RandomCrop", loc, "expected size > 0 and padding >= 0, but got size {} and padding {}",
         size, padding);
}

Tensor RandomCrop::operator()(const Tensor& x, const SampleContext& ctx) const {
  check_image("RandomCrop", x, Loc::current());
  int64_t h = x.size(-2) + 2 * padding_;
  int64_t w = x.size(-1) + 2 * padding_;
  if (h < size_ || w < size_)
    fail("RandomCrop", Loc::current(), "expected a padded image of at least {}x{}, but got {}",
         size_, size_, x.describe());
  Tensor padded = padding_ > 0 ? pad(x, {padding_, padding_, padding_, padding_}) : x;
  auto bits = sample_bits(ctx);
  int64_t top = bounded_int(bits[0], static_cast<uint64_t>(h - size_ + 1));
  int64_t left = bounded_int(bits[1], static_cast<uint64_t>(w - size_ + 1));
  return padded.narrow(-2, top, size_).narrow(-1, left, size_).contiguous();
}

RandomHorizontalFlip::RandomHorizontalFlip(double p, const Loc& loc) : p_(p) {
  if (!(p >= 0.0 && p <= 1.0))
    fail("RandomHorizontalFlip", loc, "expected 0 <= p <= 1, but got {}", p);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& x, const SampleContext& ctx) const {
  check_image("RandomHorizontalFlip", x, Loc::current());
  if (!(uniform01(sample_bits(ctx)[0]) < p_)) return x;
  int64_t w = x.size(-1);
  std::vector<int64_t> reversed(static_cast<size_t>(w));
  for (int64_t i = 0; i < w; ++i) reversed[static_cast<size_t>(i)] = w - 1 - i;
  return index_select(x, -1, tensor<int64_t>(reversed));
}

Tensor Compose::operator()(const Tensor& x, const SampleContext& ctx) const {
  Tensor out = x;
  for (size_t i = 0; i < stages_.size(); ++i) {
    SampleContext stage = ctx;
    stage.stream = ctx.stream * 64 + i + 1;
    out = stages_[i](out, stage);
  }
  return out;
}

}  // namespace kiln::data
