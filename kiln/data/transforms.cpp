#include "kiln/data/transforms.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/rng.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"

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

// Note [transform kernels]: transforms run once per sample in the loader's workers, where a
// chain of small dispatched ops (pad, narrow, contiguous, index_select, ...) costs more in
// allocations and dispatch than in arithmetic. The geometric transforms therefore move bytes
// directly (they are exact for every dtype), and the arithmetic ones have a float32 / uint8
// loop that computes exactly what the op chain computes (same operations, same order), with the
// op chain kept for the other dtypes. Transforms never record gradients.

// Reverses each row of `count` elements of `size` bytes.
void reverse_rows(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t count, size_t size) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* in = src + static_cast<size_t>(r * count) * size;
    uint8_t* out = dst + static_cast<size_t>(r * count) * size;
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(out + static_cast<size_t>(count - 1 - i) * size,
                  in + static_cast<size_t>(i) * size, size);
  }
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
  if (x.dtype() != DType::UInt8) return div(x.to(DType::Float32), 255.0);
  const Tensor in = x.contiguous();
  Tensor out = empty(in.shape(), {DType::Float32});
  const uint8_t* src = in.data<uint8_t>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < in.numel(); ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  return out;
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
  if (x.dim() < 3 || (channels != 1 && x.dim_size(-3) != channels))
    fail("Normalize", Loc::current(),
         "expected a [..., C, H, W] tensor with C = {} channels, but got {}", channels,
         x.describe());
  DType dt = is_floating(x.dtype()) ? x.dtype() : DType::Float32;
  if (x.dtype() == DType::Float32) {
    const Tensor in = x.contiguous();
    Tensor out = empty(in.shape(), {DType::Float32});
    const int64_t plane = in.dim_size(-1) * in.dim_size(-2), c_in = in.dim_size(-3);
    const float* src = in.data<float>();
    float* dst = out.data<float>();
    for (int64_t p = 0; p < in.numel() / plane; ++p) {
      const auto c = static_cast<size_t>(channels == 1 ? 0 : p % c_in);
      const auto m = static_cast<float>(mean_[c]), sd = static_cast<float>(std_[c]);
      for (int64_t i = p * plane; i < (p + 1) * plane; ++i) dst[i] = (src[i] - m) / sd;
    }
    return out;
  }
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
  int64_t h = x.dim_size(-2) + 2 * padding_;
  int64_t w = x.dim_size(-1) + 2 * padding_;
  if (h < size_ || w < size_)
    fail("RandomCrop", Loc::current(), "expected a padded image of at least {}x{}, but got {}",
         size_, size_, x.describe());
  auto bits = sample_bits(ctx);
  int64_t top = bounded_int(bits[0], static_cast<uint64_t>(h - size_ + 1));
  int64_t left = bounded_int(bits[1], static_cast<uint64_t>(w - size_ + 1));
  // The window [top, top + size) x [left, left + size) of the zero-padded image, copied row by
  // row from the image without materializing the padding (Note [transform kernels]).
  const Tensor in = x.contiguous();
  Shape shape = in.shape();
  shape[shape.size() - 2] = size_;
  shape[shape.size() - 1] = size_;
  Tensor out = zeros(shape, {in.dtype()});
  const int64_t ih = in.dim_size(-2), iw = in.dim_size(-1),
                planes = in.numel() / std::max<int64_t>(1, ih * iw);
  const size_t item = itemsize(in.dtype());
  const int64_t col0 = std::max<int64_t>(0, left - padding_);
  const int64_t col1 = std::min<int64_t>(iw, left - padding_ + size_);
  if (col1 <= col0 || in.numel() == 0) return out;
  const auto* src = static_cast<const uint8_t*>(in.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < size_; ++r) {
      const int64_t sr = top - padding_ + r;
      if (sr < 0 || sr >= ih) continue;
      const int64_t dc = col0 - (left - padding_);
      std::memcpy(dst + static_cast<size_t>((p * size_ + r) * size_ + dc) * item,
                  src + static_cast<size_t>((p * ih + sr) * iw + col0) * item,
                  static_cast<size_t>(col1 - col0) * item);
    }
  return out;
}

RandomHorizontalFlip::RandomHorizontalFlip(double p, const Loc& loc) : p_(p) {
  if (!(p >= 0.0 && p <= 1.0))
    fail("RandomHorizontalFlip", loc, "expected 0 <= p <= 1, but got {}", p);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& x, const SampleContext& ctx) const {
  check_image("RandomHorizontalFlip", x, Loc::current());
  if (!(uniform01(sample_bits(ctx)[0]) < p_)) return x;
  const Tensor in = x.contiguous();
  Tensor out = empty(in.shape(), {in.dtype()});
  const int64_t w = in.dim_size(-1);
  if (in.numel() > 0)
    reverse_rows(static_cast<const uint8_t*>(in.raw_data()), static_cast<uint8_t*>(out.raw_data()),
                 in.numel() / w, w, itemsize(in.dtype()));
  return out;
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
