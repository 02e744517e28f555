#include "kiln/core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/parallel.h"

namespace kiln {
namespace {

using Block = std::array<uint32_t, 4>;

// Restores the OpenMP thread count, so a failing test cannot leak its setting into the others.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(get_num_threads()) {}
  ~ThreadCountGuard() { set_num_threads(saved_); }

 private:
  int saved_;
};

template <class T>
double mean_of(const std::vector<T>& v) {
  double sum = 0;
  for (T x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size());
}

template <class T>
double variance_of(const std::vector<T>& v) {
  double m = mean_of(v), sum = 0;
  for (T x : v) sum += (static_cast<double>(x) - m) * (static_cast<double>(x) - m);
  return sum / static_cast<double>(v.size() - 1);
}

// Bitwise equality: NaN-safe and strict about -0 vs +0, which is what reproducibility means.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Runs fill(out, gen) from seed `seed` at offset 0 and returns the output.
template <class T, class Fill>
std::vector<T> draw(int64_t n, uint64_t seed, Fill fill) {
  Generator gen(seed);
  std::vector<T> out(static_cast<size_t>(n));
  fill(out.data(), n, gen);
  return out;
}

template <class F>
std::string error_text(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no kiln::Error thrown>";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------
// Philox

TEST(Philox, RandomKnownAnswerVectors) {
  // From Random123's kat_vectors (philox4x32 with 10 rounds).
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, BlockLayoutIsDocumentedCounterAndKey) {
  uint64_t seed = 0x0123456789abcdefull, block = 0xfedcba9876543210ull;
  EXPECT_EQ(philox_block(seed, block),
            philox4x32_10({0x76543210, 0xfedcba98, 0, 0}, {0x89abcdef, 0x01234567}));
  EXPECT_NE(philox_block(seed, 0), philox_block(seed, 1));
  EXPECT_NE(philox_block(1, 0), philox_block(2, 0));
}

// ---------------------------------------------------------------------------------------------
// Generator

TEST(Generator, SeedOffsetAndReserve) {
  Generator gen;
  EXPECT_EQ(gen.seed(), 67280421310721ull);
  EXPECT_EQ(gen.offset(), 0u);
  EXPECT_EQ(gen.reserve(5), 0u);
  EXPECT_EQ(gen.reserve(0), 5u);
  EXPECT_EQ(gen.reserve(2), 5u);
  EXPECT_EQ(gen.offset(), 7u);
  gen.set_offset(100);
  EXPECT_EQ(gen.reserve(1), 100u);
  gen.manual_seed(9);
  EXPECT_EQ(gen.seed(), 9u);
  EXPECT_EQ(gen.offset(), 0u);  // manual_seed restarts the stream
  Generator::State s = gen.reserve_with_seed(3);
  EXPECT_EQ(s.seed, 9u);
  EXPECT_EQ(s.offset, 0u);
  EXPECT_EQ(gen.offset(), 3u);
}

TEST(Generator, ReserveRefusesToWrapTheStream) {
  Generator gen(1);
  gen.set_offset(std::numeric_limits<uint64_t>::max() - 1);
  std::string text = error_text([&] { gen.reserve(2); });
  EXPECT_TRUE(contains(text, "[Generator::reserve]")) << text;
  EXPECT_EQ(gen.offset(), std::numeric_limits<uint64_t>::max() - 1);  // unchanged on failure
  EXPECT_EQ(gen.reserve(1), std::numeric_limits<uint64_t>::max() - 1);
}

TEST(Generator, ConcurrentReservesAreDisjoint) {
  Generator gen(3);
  constexpr int kThreads = 8, kPerThread = 1000;
  std::vector<std::vector<uint64_t>> bases(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) bases[t].push_back(gen.reserve(3));
    });
  for (auto& t : threads) t.join();
  std::set<uint64_t> all;
  for (auto& b : bases) all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(gen.offset(), 3u * kThreads * kPerThread);
  for (uint64_t b : all) EXPECT_EQ(b % 3, 0u);
}

TEST(Generator, StateRoundTripReproducesTheSequence) {
  Generator gen(2024);
  std::vector<float> warmup(7);
  fill_uniform(warmup.data(), 7, 0.0f, 1.0f, gen);
  Generator::State state = gen.get_state();
  std::vector<float> a(1000), b(1000), a2(1000), b2(1000);
  std::vector<int64_t> c(33), c2(33);
  fill_uniform(a.data(), 1000, -1.0f, 1.0f, gen);
  fill_normal(b.data(), 1000, 0.0f, 1.0f, gen);
  fill_randint(c.data(), 33, 0, 10, gen);

  Generator other(1);  // a different generator restored from the checkpoint continues identically
  other.set_state(state);
  EXPECT_EQ(other.seed(), 2024u);
  fill_uniform(a2.data(), 1000, -1.0f, 1.0f, other);
  fill_normal(b2.data(), 1000, 0.0f, 1.0f, other);
  fill_randint(c2.data(), 33, 0, 10, other);
  EXPECT_TRUE(same_bits(a, a2));
  EXPECT_TRUE(same_bits(b, b2));
  EXPECT_EQ(c, c2);
  EXPECT_EQ(other.get_state().offset, gen.get_state().offset);
}

TEST(Generator, DefaultGeneratorAndManualSeed) {
  Generator& gen = default_generator();
  EXPECT_EQ(&gen, &default_generator());
  manual_seed(123);
  EXPECT_EQ(gen.seed(), 123u);
  EXPECT_EQ(gen.offset(), 0u);
  std::vector<float> a(100), b(100);
  fill_uniform(a.data(), 100, 0.0f, 1.0f, default_generator());
  EXPECT_EQ(gen.offset(), 25u);
  manual_seed(123);
  fill_uniform(b.data(), 100, 0.0f, 1.0f, default_generator());
  EXPECT_TRUE(same_bits(a, b));
}

// ---------------------------------------------------------------------------------------------
// Layout: element i depends on block base + i/4 (or i/2) alone, with the documented formulas.

TEST(Fill, UniformFloatFollowsTheDocumentedLayout) {
  Generator gen(77);
  gen.set_offset(10);
  std::vector<float> out(11);
  fill_uniform(out.data(), 11, -2.0f, 3.0f, gen);
  for (int64_t i = 0; i < 11; ++i) {
    Block x = philox_block(77, 10 + i / 4);
    EXPECT_EQ(out[i], detail::scale_uniform(detail::uniform01_float(x[i % 4]), -2.0f, 3.0f));
  }
}

TEST(Fill, UniformDoubleFollowsTheDocumentedLayout) {
  Generator gen(77);
  gen.set_offset(10);
  std::vector<double> out(7);
  fill_uniform(out.data(), 7, -2.0, 3.0, gen);
  for (int64_t i = 0; i < 7; ++i) {
    Block x = philox_block(77, 10 + i / 2);
    double u = detail::uniform01_double(x[2 * (i % 2)], x[2 * (i % 2) + 1]);
    EXPECT_EQ(out[i], detail::scale_uniform(u, -2.0, 3.0));
  }
}

TEST(Fill, NormalFollowsTheDocumentedLayout) {
  Generator gen(5);
  gen.set_offset(3);
  std::vector<float> f(7);
  fill_normal(f.data(), 7, 1.0f, 2.0f, gen);
  gen.set_offset(3);
  std::vector<double> d(7);
  fill_normal(d.data(), 7, 1.0, 2.0, gen);
  for (int64_t i = 0; i < 7; ++i) {
    Block x = philox_block(5, 3 + i / 4);
    int pair = static_cast<int>(i % 4) / 2;
    auto zf = detail::box_muller_float(x[2 * pair], x[2 * pair + 1]);
    auto zd = detail::box_muller_double(x[2 * pair], x[2 * pair + 1]);
    EXPECT_EQ(f[i], 1.0f + 2.0f * zf[i % 2]);
    EXPECT_EQ(d[i], 1.0 + 2.0 * zd[i % 2]);
  }
}

TEST(Fill, RandintAndBernoulliFollowTheDocumentedLayout) {
  Generator gen(8);
  std::vector<int64_t> r(9);
  // A range of exactly 2^32 maps each lane to itself.
  fill_randint(r.data(), 9, 0, int64_t{1} << 32, gen);
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(r[i], philox_block(8, i / 4)[i % 4]);

  gen.set_offset(0);
  std::vector<uint8_t> mask(9);
  fill_bernoulli(mask.data(), 9, 0.5, gen);
  for (int64_t i = 0; i < 9; ++i)
    EXPECT_EQ(mask[i], detail::uniform01_float(philox_block(8, i / 4)[i % 4]) < 0.5);
}

TEST(Fill, OffsetsAdvanceByTheBlocksUsed) {
  for (int64_t n : {0, 1, 2, 3, 4, 5, 8, 9, 1001}) {
    SCOPED_TRACE(n);
    uint64_t quads = static_cast<uint64_t>((n + 3) / 4), pairs = static_cast<uint64_t>((n + 1) / 2);
    std::vector<float> f(static_cast<size_t>(n));
    std::vector<double> d(static_cast<size_t>(n));
    std::vector<int64_t> r(static_cast<size_t>(n));
    std::vector<uint8_t> m(static_cast<size_t>(n));
    Generator gen(1);
    auto advance = [&](auto fill) {
      uint64_t before = gen.offset();
      fill();
      return gen.offset() - before;
    };
    EXPECT_EQ(advance([&] { fill_uniform(f.data(), n, 0.0f, 1.0f, gen); }), quads);
    EXPECT_EQ(advance([&] { fill_uniform(d.data(), n, 0.0, 1.0, gen); }), pairs);
    EXPECT_EQ(advance([&] { fill_normal(f.data(), n, 0.0f, 1.0f, gen); }), quads);
    EXPECT_EQ(advance([&] { fill_normal(d.data(), n, 0.0, 1.0, gen); }), quads);
    EXPECT_EQ(advance([&] { fill_randint(r.data(), n, -5, 5, gen); }), quads);
    EXPECT_EQ(advance([&] { fill_randint(r.data(), n, 0, (int64_t{1} << 32) + 1, gen); }), pairs);
    EXPECT_EQ(advance([&] { fill_bernoulli(m.data(), n, 0.5, gen); }), quads);
  }
}

TEST(Fill, BlockAlignedFillsConcatenate) {
  // Two fills of 4k elements use consecutive blocks, so they equal one fill of twice the size.
  Generator gen(11);
  std::vector<float> whole(64), halves(64);
  fill_normal(whole.data(), 64, 0.0f, 1.0f, gen);
  gen.manual_seed(11);
  fill_normal(halves.data(), 32, 0.0f, 1.0f, gen);
  fill_normal(halves.data() + 32, 32, 0.0f, 1.0f, gen);
  EXPECT_TRUE(same_bits(whole, halves));
}

// ---------------------------------------------------------------------------------------------
// Reproducibility

TEST(Fill, SameSeedSameNumbersDifferentSeedsDiffer) {
  auto uniform = [](float* out, int64_t n, Generator& g) { fill_uniform(out, n, 0.0f, 1.0f, g); };
  auto a = draw<float>(1000, 42, uniform), b = draw<float>(1000, 42, uniform);
  auto c = draw<float>(1000, 43, uniform);
  EXPECT_TRUE(same_bits(a, b));
  int equal = 0;
  for (size_t i = 0; i < a.size(); ++i) equal += a[i] == c[i];
  EXPECT_LT(equal, 5);  // collisions happen with probability 2^-24 each

  auto randint = [](int64_t* out, int64_t n, Generator& g) { fill_randint(out, n, 0, 1000, g); };
  EXPECT_EQ(draw<int64_t>(1000, 42, randint), draw<int64_t>(1000, 42, randint));
  EXPECT_NE(draw<int64_t>(1000, 42, randint), draw<int64_t>(1000, 43, randint));
}

TEST(Fill, ResultsDoNotDependOnTheThreadCount) {
  ThreadCountGuard guard;
  // Not a multiple of 4, so the partial last block is covered; large enough for many chunks.
  const int64_t n = (int64_t{1} << 20) + 3;
  struct Outputs {
    std::vector<float> uf, nf;
    std::vector<double> ud, nd;
    std::vector<int64_t> ri, rbig;
    std::vector<uint8_t> mask;
  };
  auto run = [&](int threads) {
    set_num_threads(threads);
    EXPECT_EQ(get_num_threads(), threads);
    Generator gen(31337);
    gen.set_offset(5);
    Outputs o;
    o.uf.resize(n), o.nf.resize(n), o.ud.resize(n), o.nd.resize(n);
    o.ri.resize(n), o.rbig.resize(n), o.mask.resize(n);
    fill_uniform(o.uf.data(), n, -1.0f, 1.0f, gen);
    fill_normal(o.nf.data(), n, 0.0f, 1.0f, gen);
    fill_uniform(o.ud.data(), n, -1.0, 1.0, gen);
    fill_normal(o.nd.data(), n, 0.0, 1.0, gen);
    fill_randint(o.ri.data(), n, -100, 100, gen);
    fill_randint(o.rbig.data(), n, std::numeric_limits<int64_t>::min(),
                 std::numeric_limits<int64_t>::max(), gen);
    fill_bernoulli(o.mask.data(), n, 0.25, gen);
    return o;
  };
  Outputs one = run(1);
  for (int threads : {2, 3}) {
    SCOPED_TRACE(threads);
    Outputs many = run(threads);
    EXPECT_TRUE(same_bits(one.uf, many.uf));
    EXPECT_TRUE(same_bits(one.nf, many.nf));
    EXPECT_TRUE(same_bits(one.ud, many.ud));
    EXPECT_TRUE(same_bits(one.nd, many.nd));
    EXPECT_EQ(one.ri, many.ri);
    EXPECT_EQ(one.rbig, many.rbig);
    EXPECT_EQ(one.mask, many.mask);
  }
}

// ---------------------------------------------------------------------------------------------
// Distributions. Seeds are fixed, so these are deterministic; the bounds are ~5 standard errors
// so that a change of convention does not make them flaky.

constexpr int64_t kStatN = int64_t{1} << 20;

template <class T>
void check_uniform_statistics(T low, T high) {
  auto v = draw<T>(kStatN, 7,
                   [&](T* out, int64_t n, Generator& g) { fill_uniform(out, n, low, high, g); });
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, low);
  EXPECT_LT(*hi, high);
  double width = static_cast<double>(high) - static_cast<double>(low);
  double var = width * width / 12;
  EXPECT_NEAR(mean_of(v), (static_cast<double>(low) + high) / 2, 5 * std::sqrt(var / kStatN));
  // Relative standard error of the sample variance of a uniform is sqrt(0.8 / n) ~ 0.09%.
  EXPECT_NEAR(variance_of(v) / var, 1.0, 0.005);
  // Each tenth of the range gets a tenth of the values.
  std::vector<int64_t> bins(10);
  for (T x : v) bins[std::min<int64_t>(9, static_cast<int64_t>((x - low) / width * 10))]++;
  for (int64_t count : bins) EXPECT_NEAR(count, kStatN / 10.0, 5 * std::sqrt(kStatN * 0.09));
}

TEST(Distribution, UniformFloat) {
  check_uniform_statistics<float>(-2.0f, 3.0f);
}
TEST(Distribution, UniformDouble) {
  check_uniform_statistics<double>(-2.0, 3.0);
}

TEST(Distribution, UniformStaysBelowHighWhenRoundingWouldReachIt) {
  // The largest float uniform is 1 - 2^-24; 1 + (1 - 2^-24) rounds (to even) to 2.
  float u = detail::uniform01_float(0xffffffffu);
  EXPECT_EQ(u, 1.0f - 0x1p-24f);
  EXPECT_EQ(1.0f + 1.0f * u, 2.0f);
  EXPECT_LT(detail::scale_uniform(u, 1.0f, 2.0f), 2.0f);
  EXPECT_EQ(detail::scale_uniform(u, 1.0f, 2.0f), std::nextafter(2.0f, 1.0f));
  EXPECT_EQ(detail::uniform01_float(0), 0.0f);

  double ud = detail::uniform01_double(0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ud, 1.0 - 0x1p-53);
  EXPECT_LT(detail::scale_uniform(ud, 1.0, 2.0), 2.0);
  EXPECT_EQ(detail::uniform01_double(0, 0), 0.0);

  // low == high is allowed and gives low.
  std::vector<float> v(10);
  Generator gen(1);
  fill_uniform(v.data(), 10, 4.0f, 4.0f, gen);
  for (float x : v) EXPECT_EQ(x, 4.0f);
}

template <class T>
void check_normal_statistics() {
  const T mean = 1.5, stddev = 2;
  auto v = draw<T>(kStatN, 99,
                   [&](T* out, int64_t n, Generator& g) { fill_normal(out, n, mean, stddev, g); });
  for (T x : v) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NEAR(mean_of(v), mean, 5 * stddev / std::sqrt(kStatN));
  // The sample std of a normal has standard error std / sqrt(2n).
  EXPECT_NEAR(std::sqrt(variance_of(v)), stddev, 5 * stddev / std::sqrt(2.0 * kStatN));
  // Shape: P(|z| < 1) and P(z < 0), each within 5 binomial standard errors.
  int64_t within = 0, below = 0;
  for (T x : v) {
    double z = (static_cast<double>(x) - mean) / stddev;
    within += std::abs(z) < 1;
    below += z < 0;
  }
  double p1 = std::erf(1 / std::sqrt(2.0));
  EXPECT_NEAR(static_cast<double>(within) / kStatN, p1, 5 * std::sqrt(p1 * (1 - p1) / kStatN));
  EXPECT_NEAR(static_cast<double>(below) / kStatN, 0.5, 5 * std::sqrt(0.25 / kStatN));
  // The two outputs of one Box-Muller pair are uncorrelated.
  double sxy = 0;
  for (int64_t i = 0; i + 1 < kStatN; i += 2) sxy += (v[i] - mean) * (v[i + 1] - mean);
  double corr = sxy / (kStatN / 2) / (stddev * stddev);
  EXPECT_NEAR(corr, 0.0, 5 / std::sqrt(kStatN / 2.0));
}

TEST(Distribution, NormalFloat) {
  check_normal_statistics<float>();
}
TEST(Distribution, NormalDouble) {
  check_normal_statistics<double>();
}

TEST(Distribution, NormalExtremeLanesStayFinite) {
  // a = 0 is the smallest u1 (the tail cap); a = 0xffffffff gives u1 = 1 and r = 0.
  for (uint32_t a : {0u, 0xffffffffu})
    for (uint32_t b : {0u, 0x40000000u, 0xffffffffu}) {
      auto zf = detail::box_muller_float(a, b);
      auto zd = detail::box_muller_double(a, b);
      for (float z : zf) EXPECT_TRUE(std::isfinite(z) && std::abs(z) <= 5.8f);
      for (double z : zd) EXPECT_TRUE(std::isfinite(z) && std::abs(z) <= 6.7);
    }
  EXPECT_NEAR(detail::box_muller_float(0, 0)[0], std::sqrt(48 * std::log(2.0)), 1e-5);
  EXPECT_NEAR(detail::box_muller_double(0, 0)[0], std::sqrt(64 * std::log(2.0)), 1e-12);
}

TEST(Distribution, RandintCoversTheRangeAndNeverReachesHigh) {
  const int64_t low = -3, high = 4, k = high - low;
  auto v = draw<int64_t>(kStatN, 5, [&](int64_t* out, int64_t n, Generator& g) {
    fill_randint(out, n, low, high, g);
  });
  std::vector<int64_t> counts(k);
  for (int64_t x : v) {
    ASSERT_GE(x, low);
    ASSERT_LT(x, high);
    counts[x - low]++;
  }
  double p = 1.0 / k;
  for (int64_t c : counts)
    EXPECT_NEAR(static_cast<double>(c), kStatN * p, 5 * std::sqrt(kStatN * p * (1 - p)));

  // A single value.
  auto one = draw<int64_t>(
      100, 5, [](int64_t* out, int64_t n, Generator& g) { fill_randint(out, n, 7, 8, g); });
  for (int64_t x : one) EXPECT_EQ(x, 7);
}

TEST(Distribution, RandintFullInt64Range) {
  const int64_t low = std::numeric_limits<int64_t>::min();
  const int64_t high = std::numeric_limits<int64_t>::max();
  auto v = draw<int64_t>(
      4096, 5, [&](int64_t* out, int64_t n, Generator& g) { fill_randint(out, n, low, high, g); });
  int64_t negative = 0;
  for (int64_t x : v) {
    EXPECT_NE(x, high);
    negative += x < 0;
  }
  EXPECT_NEAR(negative, 2048, 5 * 32);
  // Values beyond 32 bits actually occur (the 64-bit path is used).
  int64_t wide = std::count_if(v.begin(), v.end(), [](int64_t x) {
    return x > (int64_t{1} << 40) || x < -(int64_t{1} << 40);
  });
  EXPECT_GT(wide, 4000);
}

TEST(Distribution, Bernoulli) {
  auto bern = [](double p) {
    return draw<uint8_t>(
        kStatN, 13, [p](uint8_t* out, int64_t n, Generator& g) { fill_bernoulli(out, n, p, g); });
  };
  for (uint8_t x : bern(0.0)) ASSERT_EQ(x, 0);
  for (uint8_t x : bern(1.0)) ASSERT_EQ(x, 1);
  auto m = bern(0.3);
  int64_t ones = 0;
  for (uint8_t x : m) {
    ASSERT_LE(x, 1);
    ones += x;
  }
  EXPECT_NEAR(static_cast<double>(ones) / kStatN, 0.3, 5 * std::sqrt(0.21 / kStatN));

  // Same state, same mask as `rand(float) < p`.
  auto u = draw<float>(
      kStatN, 13, [](float* out, int64_t n, Generator& g) { fill_uniform(out, n, 0.0f, 1.0f, g); });
  for (int64_t i = 0; i < kStatN; ++i) ASSERT_EQ(m[i], u[i] < 0.3) << i;
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(Errors, RandintRequiresLowBelowHigh) {
  Generator gen(1);
  std::vector<int64_t> out(4);
  std::string text = error_text([&] { fill_randint(out.data(), 4, 5, 3, gen); });
  EXPECT_TRUE(contains(text, "[randint] expected low < high, but got low=5, high=3")) << text;
  // The location is the caller's, thanks to the defaulted std::source_location.
  EXPECT_TRUE(contains(text, "test_rng.cpp:")) << text;
  EXPECT_THROW(fill_randint(out.data(), 4, 3, 3, gen), Error);
  EXPECT_EQ(gen.offset(), 0u);  // a rejected fill consumes nothing
}

TEST(Errors, BadArgumentsThrow) {
  Generator gen(1);
  std::vector<float> f(4);
  std::vector<double> d(4);
  std::vector<uint8_t> m(4);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(contains(error_text([&] { fill_uniform(f.data(), 4, 2.0f, 1.0f, gen); }),
                       "[uniform] expected low <= high, but got low=2, high=1"));
  EXPECT_THROW(fill_uniform(d.data(), 4, 0.0, nan, gen), Error);
  EXPECT_THROW(fill_uniform(f.data(), 4, 0.0f, inf, gen), Error);
  EXPECT_THROW(fill_uniform(f.data(), 4, -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::max(), gen),
               Error);
  EXPECT_TRUE(contains(error_text([&] { fill_normal(f.data(), 4, 0.0f, -1.0f, gen); }),
                       "[normal] expected std >= 0, but got std=-1"));
  EXPECT_THROW(fill_normal(d.data(), 4, 0.0, nan, gen), Error);
  EXPECT_TRUE(contains(error_text([&] { fill_bernoulli(m.data(), 4, 1.5, gen); }),
                       "[bernoulli] expected 0 <= p <= 1, but got p=1.5"));
  EXPECT_THROW(fill_bernoulli(m.data(), 4, -0.1, gen), Error);
  EXPECT_THROW(fill_bernoulli(m.data(), 4, nan, gen), Error);
  EXPECT_TRUE(contains(error_text([&] { fill_uniform(f.data(), -1, 0.0f, 1.0f, gen); }),
                       "[uniform] expected a non-negative element count, but got n=-1"));
  EXPECT_THROW(fill_normal(static_cast<float*>(nullptr), 4, 0.0f, 1.0f, gen), Error);
  EXPECT_NO_THROW(fill_normal(static_cast<float*>(nullptr), 0, 0.0f, 1.0f, gen));
  EXPECT_EQ(gen.offset(), 0u);
}

}  // namespace
}  // namespace kiln
