// Size computations from user-given shapes are checked: an element or byte count that int64 (or
// the address space) cannot hold is an error naming the op, the shape and the caller's line.
#include <gtest/gtest.h>

#include "kiln/core/allocator.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/pad.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;

constexpr int64_t k40 = int64_t{1} << 40;
constexpr int64_t k62 = int64_t{1} << 62;

TEST(Sizes, ByteCountOverflowIsAnErrorNamingTheFactory) {
  const int line = __LINE__ + 1;
  std::string msg = error_of([] { (void)zeros({k62}); });
  expect_contains(msg, {"[zeros]", "[4611686018427387904]", "float32", "bytes",
                        "test_sizes.cpp:" + std::to_string(line)});
}

TEST(Sizes, ElementCountOverflowIsAnError) {
  const int line = __LINE__ + 1;
  std::string msg = error_of([] { (void)empty({k40, k40}); });
  expect_contains(msg, {"[empty]", "[1099511627776, 1099511627776]", "2^63 - 1",
                        "test_sizes.cpp:" + std::to_string(line)});
  for (auto make : {+[] {
                      (void)full({k62, 4}, 1.0);
                    },
                    +[] {
                      (void)rand({k62, 4});
                    },
                    +[] {
                      (void)randn({k62, 8});
                    },
                    +[] {
                      (void)randint(0, 3, {k62, k62});
                    }})
    expect_contains(error_of(make), {"test_sizes.cpp"});
}

TEST(Sizes, EveryFactoryNamesItself) {
  expect_contains(error_of([] { (void)eye(k40, k40); }), {"[eye]", "test_sizes.cpp"});
  expect_contains(error_of([] { (void)linspace(0, 1, k62); }), {"[linspace]", "test_sizes.cpp"});
}

TEST(Sizes, AnOpWhoseOutputCannotBeCountedIsRefusedBeforeItsKernel) {
  Tensor x = zeros({1, 1});
  // Padding 2^40 on both dims of a matrix: 2^80 elements.
  const int line = __LINE__ + 1;
  std::string msg = error_of([&] { (void)pad(x, {k40, 0, k40, 0}); });
  expect_contains(msg, {"[pad]", "2^63 - 1", "test_sizes.cpp:" + std::to_string(line)});
}

TEST(Sizes, ZeroSizedDimsMakeEmptyTensorsWhateverTheOtherSizes) {
  // As in PyTorch: the count is 0, nothing overflows.
  Tensor t = zeros({0, k62, k62});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
}

TEST(Sizes, ReshapeToAnOverflowingShapeIsRefused) {
  Tensor x = zeros({4});
  // 2^62 * 4 + ... wraps to 4 without the check, which would make a 4-element view of 2^64.
  std::string msg = error_of([&] { (void)reshape(x, {k62 + 1, 4}); });
  expect_contains(msg, {"[reshape]", "is invalid for input", "test_sizes.cpp"});
  expect_contains(error_of([&] { (void)reshape(x, {k62, 4, -1}); }), {"[reshape]"});
  expect_contains(error_of([] { (void)reshape(zeros({0}), {k62, 4}); }), {"[reshape]"});
  expect_contains(error_of([&] { (void)view(x, {k62 + 1, 4}); }), {"is invalid for input"});
}

TEST(Sizes, ExpandToAnOverflowingShapeIsRefused) {
  Tensor x = zeros({1});
  std::string msg = error_of([&] { (void)expand(x, {k40, k40, 1}); });
  expect_contains(msg, {"[expand]", "2^63 - 1", "test_sizes.cpp"});
}

TEST(Sizes, NegativeSizesAreRefusedByEveryFactory) {
  expect_contains(error_of([] { (void)zeros({2, -1}); }), {"[zeros]", "non-negative", "[2, -1]"});
  expect_contains(error_of([] { (void)empty({-3}); }), {"[empty]", "non-negative"});
}

TEST(Sizes, OutOfMemoryNamesTheFactoryAndTheLine) {
  set_memory_limit(memory_stats().reserved_bytes + (size_t{8} << 20));
  const int line = __LINE__ + 1;
  std::string msg = error_of([] { (void)zeros({64, 1024, 1024}); });
  set_memory_limit(0);
  expect_contains(msg, {"[zeros] out of memory", "256.00 MiB", "with a limit of",
                        "test_sizes.cpp:" + std::to_string(line)});
}

}  // namespace
}  // namespace kiln
