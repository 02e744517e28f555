#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <numbers>
#include <source_location>

namespace kiln {

// Note [random streams]
// ~~~~~~~~~~~~~~~~~~~~~
// kiln draws random numbers from Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011), the counter-based generator of cuRAND, PyTorch's CUDA generator and JAX.
// Philox is a pure function of (counter, key), so any element can be computed without computing
// the ones before it. That is what makes fills parallel yet independent of the thread count.
//
// Stream layout. A Generator is a pair (seed, offset). Block b of seed s is
//   philox4x32_10(counter = {lo32(b), hi32(b), 0, 0}, key = {lo32(s), hi32(s)})
// (see philox_block). `offset` counts blocks already handed out; a fill of n elements reserves its
// blocks with Generator::reserve and starts at block `base`, the offset before the fill.
//
// Which block each element uses (lanes are the four uint32 words of a block):
//   fill_uniform (float), fill_normal (float and double), fill_bernoulli, fill_randint with
//   high - low <= 2^32:
//       element i uses block base + i / 4 only; reserves ceil(n / 4) blocks.
//   fill_uniform (double), fill_randint with high - low > 2^32 (they need 64 random bits):
//       element i uses lanes 2 * (i % 2) (high word) and 2 * (i % 2) + 1 (low word) of block
//       base + i / 2 only; reserves ceil(n / 2) blocks.
// Lanes of a final, partly used block are discarded. Since no element reads another element's
// block, the output is the same for any thread count and any chunking.
//
// Bits to values (detail:: below holds the exact formulas, shared with fused kernels):
//   uniform float:  u = (x >> 8) * 2^-24, in [0, 1 - 2^-24]; value = low + (high - low) * u.
//   uniform double: u = (x64 >> 11) * 2^-53, in [0, 1 - 2^-53]; value = low + (high - low) * u.
//     Rounding can carry low + (high - low) * u up to `high` (e.g. low = 1, high = 2 for float);
//     such values are replaced by the largest representable value below `high`, so the result
//     is always in [low, high).
//   normal: Box-Muller on the lane pairs (0, 1) and (2, 3) of a block. For a pair (a, b):
//     u1 in (0, 1] from a (so log(u1) is finite), u2 in [0, 1) from b,
//     r = sqrt(-2 log u1), element 4k + 2p gets mean + stddev * r * cos(2 pi u2) and element
//     4k + 2p + 1 gets mean + stddev * r * sin(2 pi u2), p being the pair (0 or 1).
//     float: u1 = ((a >> 8) + 1) * 2^-24, u2 = (b >> 8) * 2^-24, math in float; |z| <= 5.77.
//     double: u1 = (a + 1) * 2^-32, u2 = b * 2^-32, math in double; |z| <= 6.66.
//     The tails are cut at those values because u1 has 24 (32) bits; cuRAND does the same.
//   bernoulli: out[i] = ((x >> 8) * 2^-24 < p), i.e. exactly the mask `rand(float) < p` would
//     give from the same generator state.
//   randint: r = high - low (computed in uint64); value = low + ((x * r) >> 32) for r <= 2^32,
//     low + ((x64 * r) >> 64) otherwise (Lemire's multiply-shift, no rejection, so the one-block
//     rule holds). Each value gets floor or ceil of 2^32 / r (2^64 / r) of the inputs: the
//     relative bias is below r / 2^32 (r / 2^64), which is what PyTorch's modulo mapping has too.
//
// Compatibility. These streams are NOT bit-compatible with PyTorch's CPU generator (mt19937):
// torch.manual_seed(s) followed by torch.rand gives different numbers than kiln::manual_seed(s)
// followed by a kiln fill. Nor do they match PyTorch's CUDA Philox streams, which lay out
// counters per thread. Parity tests must compare statistics or feed kiln's numbers to PyTorch,
// never rely on equal seeds. Normal values go through std::log, std::cos and std::sin, so they
// are bit-reproducible only with the same libm and without -ffast-math style flags.

// Philox4x32-10: pure function of (counter, key). Matches the Random123 known-answer vectors.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Block `block` of the stream of `seed`; see Note [random streams].
inline std::array<uint32_t, 4> philox_block(uint64_t seed, uint64_t block) {
  return philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// A generator is (seed, offset); draws are keyed by (seed, block index), so results never depend
// on the thread count. All members are thread-safe. Not copyable: a copy would silently replay
// the same stream (e.g. two dropout layers with identical masks); use get_state/set_state to fork
// or checkpoint deliberately.
class Generator {
 public:
  // The default seed is PyTorch's default seed value (only the value; the streams differ).
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Sets the seed and restarts the stream (offset 0).
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  // Number of 128-bit Philox blocks consumed so far.
  uint64_t offset() const;
  void set_offset(uint64_t offset);

  // Reserves `blocks` Philox blocks (each gives 4 uint32) and returns the first block index.
  // Throws kiln::Error if the 64-bit block index would wrap, since that would replay the stream.
  uint64_t reserve(uint64_t blocks, std::source_location loc = std::source_location::current());

  // For checkpoints: set_state(get_state()) reproduces every later draw.
  struct State {
    uint64_t seed;
    uint64_t offset;
  };
  State get_state() const;
  void set_state(State s);

  // Like reserve, but also returns the seed under the same lock, so a concurrent manual_seed
  // cannot pair the new seed with the old offset. Returns {seed, first block index}.
  State reserve_with_seed(uint64_t blocks,
                          std::source_location loc = std::source_location::current());

 private:
  // A mutex rather than atomics: (seed, offset) must change together, and it is taken once per
  // fill, never per element.
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when an op is not given one. Thread-safe.
Generator& default_generator();
// Seeds default_generator() and resets its offset.
void manual_seed(uint64_t seed);

// The blocks a fill of n elements reserves (Note [random streams]): one per four elements, or
// one per two for fills that need 64 random bits per element ("wide": double uniforms, randint
// over a range above 2^32). A random op reserves them when it is called and records the start, so
// it can be replayed.
inline uint64_t random_blocks(int64_t n, bool wide) {
  return static_cast<uint64_t>(wide ? (n + 1) / 2 : (n + 3) / 4);
}

// Bulk fills used by the tensor factories. Each reserves its blocks from `gen` (see
// Note [random streams] for the layout) and runs on kiln::parallel_for; the output depends only
// on (gen's state, n, arguments), never on the thread count. n must be >= 0 and out non-null when
// n > 0; violations throw kiln::Error blaming `loc`.

// Values in [low, high); requires low <= high with high - low finite (low == high gives low).
void fill_uniform(float* out, int64_t n, float low, float high, Generator& gen,
                  std::source_location loc = std::source_location::current());
// 53-bit uniforms: element i uses lanes 2*(i%2), 2*(i%2)+1 of block base + i/2, so this fill
// reserves ceil(n/2) blocks instead of ceil(n/4).
void fill_uniform(double* out, int64_t n, double low, double high, Generator& gen,
                  std::source_location loc = std::source_location::current());
// Normal(mean, stddev) by Box-Muller; requires stddev >= 0.
void fill_normal(float* out, int64_t n, float mean, float stddev, Generator& gen,
                 std::source_location loc = std::source_location::current());
void fill_normal(double* out, int64_t n, double mean, double stddev, Generator& gen,
                 std::source_location loc = std::source_location::current());
// Integers in [low, high); requires low < high. Ranges above 2^32 use two lanes per element and
// reserve ceil(n/2) blocks.
void fill_randint(int64_t* out, int64_t n, int64_t low, int64_t high, Generator& gen,
                  std::source_location loc = std::source_location::current());
// out[i] = 1 with probability p, else 0 (the mask dropout keeps); requires 0 <= p <= 1.
void fill_bernoulli(uint8_t* out, int64_t n, double p, Generator& gen,
                    std::source_location loc = std::source_location::current());

// The exact bits-to-value maps of Note [random streams], inline so that fused kernels (dropout)
// that call philox_block themselves produce the same numbers as the fills.
namespace detail {

// (x >> 8) * 2^-24: in [0, 1), exactly representable in float.
inline float uniform01_float(uint32_t x) {
  return static_cast<float>(x >> 8) * 0x1p-24f;
}
// ((x >> 8) + 1) * 2^-24: in (0, 1], for Box-Muller's log.
inline float uniform01_open_float(uint32_t x) {
  return static_cast<float>((x >> 8) + 1) * 0x1p-24f;
}
// Top 53 bits of hi:lo, times 2^-53: in [0, 1).
inline double uniform01_double(uint32_t hi, uint32_t lo) {
  uint64_t x = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(x >> 11) * 0x1p-53;
}
inline double uniform01_open_double32(uint32_t x) {
  return (static_cast<double>(x) + 1.0) * 0x1p-32;
}
inline double uniform01_double32(uint32_t x) {
  return static_cast<double>(x) * 0x1p-32;
}

// low + (high - low) * u, kept below high when rounding would reach it (high > low). When
// low == high the result is low.
template <class T>
inline T scale_uniform(T u, T low, T high) {
  T v = low + (high - low) * u;
  return v < high ? v : std::nextafter(high, low);
}

// Box-Muller for one lane pair: {r cos(2 pi u2), r sin(2 pi u2)} with r = sqrt(-2 log u1).
inline std::array<float, 2> box_muller_float(uint32_t a, uint32_t b) {
  float r = std::sqrt(-2.0f * std::log(uniform01_open_float(a)));
  float theta = 2.0f * std::numbers::pi_v<float> * uniform01_float(b);
  return {r * std::cos(theta), r * std::sin(theta)};
}
inline std::array<double, 2> box_muller_double(uint32_t a, uint32_t b) {
  double r = std::sqrt(-2.0 * std::log(uniform01_open_double32(a)));
  double theta = 2.0 * std::numbers::pi * uniform01_double32(b);
  return {r * std::cos(theta), r * std::sin(theta)};
}

}  // namespace detail
}  // namespace kiln
