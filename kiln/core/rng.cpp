#include "kiln/core/rng.h"

#include <algorithm>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/core/parallel.h"

namespace kiln {

namespace {

// Constants from Random123's philox.h.
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

// Elements per parallel_for chunk (at least). Chunks are cut on block boundaries (see
// for_each_block), so the grain only affects speed.
constexpr int64_t kGrainElements = 16384;

std::array<uint32_t, 4> philox_round(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
  uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
  return {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
}

// High 64 bits of a * b, without relying on the non-standard __int128.
uint64_t mulhi64(uint64_t a, uint64_t b) {
  uint64_t a_lo = static_cast<uint32_t>(a), a_hi = a >> 32;
  uint64_t b_lo = static_cast<uint32_t>(b), b_hi = b >> 32;
  uint64_t lo_lo = a_lo * b_lo;
  uint64_t hi_lo = a_hi * b_lo;
  uint64_t lo_hi = a_lo * b_hi;
  uint64_t hi_hi = a_hi * b_hi;
  uint64_t cross = (lo_lo >> 32) + static_cast<uint32_t>(hi_lo) + lo_hi;
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

void check_count(const char* op, const void* out, int64_t n, const std::source_location& loc) {
  if (n < 0) fail(op, loc, "expected a non-negative element count, but got n={}", n);
  if (n > 0 && out == nullptr) fail(op, loc, "expected a non-null output for n={}", n);
}

// Reserves `blocks` blocks and calls f(j, block) for j in [0, blocks) with block the j-th of
// them. Parallel over blocks rather than elements so that every chunk starts on a block boundary
// and each block is generated once.
template <class F>
void for_each_block(Generator& gen, int64_t blocks, int64_t elements_per_block,
                    const std::source_location& loc, F&& f) {
  Generator::State s = gen.reserve_with_seed(static_cast<uint64_t>(blocks), loc);
  parallel_for(0, blocks, kGrainElements / elements_per_block, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j)
      f(j, philox_block(s.seed, s.offset + static_cast<uint64_t>(j)));
  });
}

// Fills where element i comes from lane i % 4 of block i / 4 alone; value(lane_bits) maps bits.
template <class T, class V>
void fill_per_lane(T* out, int64_t n, Generator& gen, const std::source_location& loc, V value) {
  const auto blocks = static_cast<int64_t>(random_blocks(n, false));
  for_each_block(gen, blocks, 4, loc, [&](int64_t j, const std::array<uint32_t, 4>& x) {
    int64_t i0 = 4 * j;
    if (i0 + 4 <= n) {
      for (int l = 0; l < 4; ++l) out[i0 + l] = value(x[l]);
    } else {
      for (int64_t l = 0; i0 + l < n; ++l) out[i0 + l] = value(x[l]);
    }
  });
}

// Fills where element i comes from lanes 2*(i%2), 2*(i%2)+1 of block i / 2 alone.
template <class T, class V>
void fill_per_lane_pair(T* out, int64_t n, Generator& gen, const std::source_location& loc,
                        V value) {
  const auto blocks = static_cast<int64_t>(random_blocks(n, true));
  for_each_block(gen, blocks, 2, loc, [&](int64_t j, const std::array<uint32_t, 4>& x) {
    int64_t i0 = 2 * j;
    out[i0] = value(x[0], x[1]);
    if (i0 + 1 < n) out[i0 + 1] = value(x[2], x[3]);
  });
}

// Box-Muller fills: lane pairs (0, 1) and (2, 3) each give two normals.
template <class T, class BoxMuller>
void fill_normal_impl(T* out, int64_t n, T mean, T stddev, Generator& gen,
                      const std::source_location& loc, BoxMuller box_muller) {
  const auto blocks = static_cast<int64_t>(random_blocks(n, false));
  for_each_block(gen, blocks, 4, loc, [&](int64_t j, const std::array<uint32_t, 4>& x) {
    std::array<T, 2> z01 = box_muller(x[0], x[1]);
    std::array<T, 2> z23 = box_muller(x[2], x[3]);
    std::array<T, 4> z = {z01[0], z01[1], z23[0], z23[1]};
    int64_t i0 = 4 * j;
    int64_t count = std::min<int64_t>(4, n - i0);
    for (int64_t l = 0; l < count; ++l) out[i0 + l] = mean + stddev * z[l];
  });
}

template <class T>
void check_uniform_args(T low, T high, const std::source_location& loc) {
  // Written so that NaN fails too.
  if (!(low <= high))
    fail("uniform", loc, "expected low <= high, but got low={}, high={}", low, high);
  if (!std::isfinite(high - low))
    fail("uniform", loc, "expected a finite range high - low, but got low={}, high={}", low, high);
}

template <class T>
void check_normal_args(T stddev, const std::source_location& loc) {
  // Written so that NaN fails too.
  if (!(stddev >= 0)) fail("normal", loc, "expected std >= 0, but got std={}", stddev);
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    counter = philox_round(counter, key);
  }
  return counter;
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  offset_ = offset;
}

uint64_t Generator::reserve(uint64_t blocks, std::source_location loc) {
  return reserve_with_seed(blocks, loc).offset;
}

Generator::State Generator::reserve_with_seed(uint64_t blocks, std::source_location loc) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (blocks > std::numeric_limits<uint64_t>::max() - offset_)
    fail("Generator::reserve", loc,
         "expected the stream to have {} more blocks, but the offset is {}; reseed or set_offset",
         blocks, offset_);
  State s{seed_, offset_};
  offset_ += blocks;
  return s;
}

Generator::State Generator::get_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {seed_, offset_};
}

void Generator::set_state(State s) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = s.seed;
  offset_ = s.offset;
}

Generator& default_generator() {
  // A function-local static: initialization is thread-safe and happens on first use, so other
  // static initializers may already draw from it.
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

void fill_uniform(float* out, int64_t n, float low, float high, Generator& gen,
                  std::source_location loc) {
  check_count("uniform", out, n, loc);
  check_uniform_args(low, high, loc);
  fill_per_lane(out, n, gen, loc, [low, high](uint32_t x) {
    return detail::scale_uniform(detail::uniform01_float(x), low, high);
  });
}

void fill_uniform(double* out, int64_t n, double low, double high, Generator& gen,
                  std::source_location loc) {
  check_count("uniform", out, n, loc);
  check_uniform_args(low, high, loc);
  fill_per_lane_pair(out, n, gen, loc, [low, high](uint32_t hi, uint32_t lo) {
    return detail::scale_uniform(detail::uniform01_double(hi, lo), low, high);
  });
}

void fill_normal(float* out, int64_t n, float mean, float stddev, Generator& gen,
                 std::source_location loc) {
  check_count("normal", out, n, loc);
  check_normal_args(stddev, loc);
  fill_normal_impl(out, n, mean, stddev, gen, loc,
                   [](uint32_t a, uint32_t b) { return detail::box_muller_float(a, b); });
}

void fill_normal(double* out, int64_t n, double mean, double stddev, Generator& gen,
                 std::source_location loc) {
  check_count("normal", out, n, loc);
  check_normal_args(stddev, loc);
  fill_normal_impl(out, n, mean, stddev, gen, loc,
                   [](uint32_t a, uint32_t b) { return detail::box_muller_double(a, b); });
}

void fill_randint(int64_t* out, int64_t n, int64_t low, int64_t high, Generator& gen,
                  std::source_location loc) {
  check_count("randint", out, n, loc);
  if (!(low < high))
    fail("randint", loc, "expected low < high, but got low={}, high={}", low, high);
  // Unsigned arithmetic: high - low may exceed INT64_MAX, and the wrap back to int64 is exact.
  uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  uint64_t ulow = static_cast<uint64_t>(low);
  if (range <= (uint64_t{1} << 32)) {
    // x * range < 2^64 because x < 2^32 and range <= 2^32.
    fill_per_lane(out, n, gen, loc, [ulow, range](uint32_t x) {
      return static_cast<int64_t>(ulow + ((static_cast<uint64_t>(x) * range) >> 32));
    });
  } else {
    fill_per_lane_pair(out, n, gen, loc, [ulow, range](uint32_t hi, uint32_t lo) {
      uint64_t x = (static_cast<uint64_t>(hi) << 32) | lo;
      return static_cast<int64_t>(ulow + mulhi64(x, range));
    });
  }
}

void fill_bernoulli(uint8_t* out, int64_t n, double p, Generator& gen, std::source_location loc) {
  check_count("bernoulli", out, n, loc);
  if (!(p >= 0.0 && p <= 1.0)) fail("bernoulli", loc, "expected 0 <= p <= 1, but got p={}", p);
  fill_per_lane(out, n, gen, loc, [p](uint32_t x) {
    // The float uniform is exact in double, so this equals `rand(float) < p`.
    return static_cast<uint8_t>(static_cast<double>(detail::uniform01_float(x)) < p);
  });
}

}  // namespace kiln
