#include "kiln/core/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace kiln {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

// Sanitizer runtimes abort on an impossible allocation instead of returning null.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr bool kSanitizedAllocator = true;
#else
constexpr bool kSanitizedAllocator = false;
#endif
#else
constexpr bool kSanitizedAllocator = false;
#endif

CachingAllocator& alloc() {
  return CachingAllocator::instance();
}

// Removes the memory limit however the test ends, so a failing test cannot starve the others.
class MemoryLimitGuard {
 public:
  explicit MemoryLimitGuard(size_t bytes) { set_memory_limit(bytes); }
  ~MemoryLimitGuard() { set_memory_limit(0); }
  MemoryLimitGuard(const MemoryLimitGuard&) = delete;
  MemoryLimitGuard& operator=(const MemoryLimitGuard&) = delete;
};

// The allocator is a process-wide singleton, so other tests may have left live allocations in
// partly used segments. Their free remainders would serve our requests and spoil the exact deltas,
// so the fixture empties the cache, pins every remaining free block, and takes the baseline then.
class AllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_memory_limit(0);
    empty_cache();
    for (int64_t free = memory_stats().largest_free_block; free > 0;
         free = memory_stats().largest_free_block) {
      int64_t misses = memory_stats().cache_misses;
      void* p = alloc().allocate(static_cast<size_t>(free));
      if (memory_stats().cache_misses != misses) {
        // A small-pool block over kSmallRequest: a request of its size goes to the large pool.
        alloc().deallocate(p);
        empty_cache();
        p = alloc().allocate(CachingAllocator::kSmallRequest);
      }
      pinned_.push_back(p);
    }
    base_ = memory_stats();
    ASSERT_EQ(base_.largest_free_block, 0);
    ASSERT_EQ(base_.reserved_bytes, base_.allocated_bytes);
  }

  void TearDown() override {
    set_memory_limit(0);
    for (void* p : pinned_) alloc().deallocate(p);
  }

  MemoryStats base_;
  std::vector<void*> pinned_;
};

TEST_F(AllocatorTest, ZeroBytesIsNullAndFreeingNullIsNoop) {
  EXPECT_EQ(alloc().allocate(0), nullptr);
  alloc().deallocate(nullptr);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.num_allocations, base_.num_allocations);
  EXPECT_EQ(s.num_frees, base_.num_frees);
  EXPECT_EQ(s.reserved_bytes, base_.reserved_bytes);
}

TEST_F(AllocatorTest, RoundsRequestsUpTo512Bytes) {
  void* one = alloc().allocate(1);
  EXPECT_EQ(memory_stats().allocated_bytes - base_.allocated_bytes, 512);
  void* exact = alloc().allocate(512);
  EXPECT_EQ(memory_stats().allocated_bytes - base_.allocated_bytes, 1024);
  void* over = alloc().allocate(513);
  EXPECT_EQ(memory_stats().allocated_bytes - base_.allocated_bytes, 2048);
  // Rounding makes the blocks adjacent in the segment.
  EXPECT_EQ(static_cast<char*>(exact) - static_cast<char*>(one), 512);
  EXPECT_EQ(static_cast<char*>(over) - static_cast<char*>(exact), 512);
  for (void* p : {one, exact, over}) alloc().deallocate(p);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.allocated_bytes, base_.allocated_bytes);
  EXPECT_EQ(s.num_allocations - base_.num_allocations, 3);
  EXPECT_EQ(s.num_frees - base_.num_frees, 3);
}

TEST_F(AllocatorTest, ReturnsPointersAlignedTo64Bytes) {
  std::vector<void*> ptrs;
  for (size_t n : {1, 7, 64, 100, 511, 4097, 1 << 20, (1 << 20) + 1, 3 << 20}) {
    void* p = alloc().allocate(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % CachingAllocator::kAlignment, 0u) << n;
    std::memset(p, 0xab, n);  // the whole request must be writable
    ptrs.push_back(p);
  }
  for (void* p : ptrs) alloc().deallocate(p);
}

TEST_F(AllocatorTest, FreedBlockIsReusedAsCacheHit) {
  void* first = alloc().allocate(kKiB);
  MemoryStats after_first = memory_stats();
  EXPECT_EQ(after_first.cache_misses - base_.cache_misses, 1);
  EXPECT_EQ(after_first.cache_hits - base_.cache_hits, 0);
  EXPECT_EQ(after_first.reserved_bytes - base_.reserved_bytes, 2 * kMiB);
  alloc().deallocate(first);

  void* again = alloc().allocate(kKiB);
  EXPECT_EQ(again, first);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.cache_hits - base_.cache_hits, 1);
  EXPECT_EQ(s.cache_misses - base_.cache_misses, 1);
  EXPECT_EQ(s.reserved_bytes, after_first.reserved_bytes);
  EXPECT_EQ(s.num_segments - base_.num_segments, 1);
  alloc().deallocate(again);
}

TEST_F(AllocatorTest, SmallRequestsSplitOneSegment) {
  void* a = alloc().allocate(kKiB);
  void* b = alloc().allocate(kKiB);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.num_segments - base_.num_segments, 1);
  EXPECT_EQ(s.allocated_bytes - base_.allocated_bytes, 2 * kKiB);
  EXPECT_EQ(s.cache_misses - base_.cache_misses, 1);
  EXPECT_EQ(s.cache_hits - base_.cache_hits, 1);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), kKiB);
  EXPECT_EQ(s.largest_free_block, 2 * kMiB - 2 * kKiB);
  alloc().deallocate(a);
  alloc().deallocate(b);
}

TEST_F(AllocatorTest, FreedNeighboursMerge) {
  void* a = alloc().allocate(kKiB);
  void* b = alloc().allocate(kKiB);
  void* c = alloc().allocate(kKiB);  // keeps b from merging with the segment's tail
  alloc().deallocate(a);
  alloc().deallocate(b);
  MemoryStats before = memory_stats();

  // Only the merged a+b block holds 2 KiB; best fit prefers it over the large tail.
  void* ab = alloc().allocate(2 * kKiB);
  EXPECT_EQ(ab, a);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.cache_hits - before.cache_hits, 1);
  EXPECT_EQ(s.cache_misses, before.cache_misses);
  EXPECT_EQ(s.reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(s.num_segments, before.num_segments);

  alloc().deallocate(c);
  alloc().deallocate(ab);
  s = memory_stats();
  EXPECT_EQ(s.largest_free_block, 2 * kMiB);  // the whole segment is one block again
  EXPECT_EQ(s.fragmentation, 0.0);
}

TEST_F(AllocatorTest, LargeRequestGetsSegmentOfItsRoundedSize) {
  void* p = alloc().allocate(3 * kMiB);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 3 * kMiB);
  EXPECT_EQ(s.allocated_bytes - base_.allocated_bytes, 3 * kMiB);
  EXPECT_EQ(s.num_segments - base_.num_segments, 1);
  EXPECT_EQ(s.cache_misses - base_.cache_misses, 1);
  EXPECT_EQ(s.largest_free_block, 0);
  alloc().deallocate(p);
  EXPECT_EQ(memory_stats().largest_free_block, 3 * kMiB);

  void* again = alloc().allocate(3 * kMiB);
  EXPECT_EQ(again, p);
  s = memory_stats();
  EXPECT_EQ(s.cache_hits - base_.cache_hits, 1);
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 3 * kMiB);
  alloc().deallocate(again);
}

TEST_F(AllocatorTest, OneMebibyteIsSmallAndOneByteMoreIsLarge) {
  void* small = alloc().allocate(CachingAllocator::kSmallRequest);
  EXPECT_EQ(memory_stats().reserved_bytes - base_.reserved_bytes, 2 * kMiB);
  void* large = alloc().allocate(CachingAllocator::kSmallRequest + 1);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 2 * kMiB + kMiB + 512);
  EXPECT_EQ(s.allocated_bytes - base_.allocated_bytes, 2 * kMiB + 512);
  EXPECT_EQ(s.num_segments - base_.num_segments, 2);
  alloc().deallocate(small);
  alloc().deallocate(large);
}

TEST_F(AllocatorTest, PoolsAreSeparate) {
  void* large = alloc().allocate(4 * kMiB);
  alloc().deallocate(large);
  // A cached 4 MiB large block must not serve a small request.
  void* small = alloc().allocate(kKiB);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.cache_misses - base_.cache_misses, 2);
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 6 * kMiB);
  alloc().deallocate(small);

  // Nor does the small segment's free 1.5 MiB tail serve a 1.5 MiB (large) request, though it fits
  // exactly and best fit across pools would pick it.
  void* piece = alloc().allocate(512 * kKiB);
  void* big = alloc().allocate(kMiB + 512 * kKiB);
  s = memory_stats();
  EXPECT_EQ(s.cache_misses - base_.cache_misses, 2);  // the 4 MiB block split instead
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 6 * kMiB);
  EXPECT_EQ(big, large);
  alloc().deallocate(piece);
  alloc().deallocate(big);
}

TEST_F(AllocatorTest, LargeBlockSplitsOnlyForRemainderOverOneMebibyte) {
  void* seg = alloc().allocate(4 * kMiB);
  alloc().deallocate(seg);

  // Remainder 512 KiB: too small for the large pool, so the whole block is handed out.
  void* whole = alloc().allocate(3 * kMiB + 512 * kKiB);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.allocated_bytes - base_.allocated_bytes, 4 * kMiB);
  EXPECT_EQ(s.largest_free_block, 0);
  alloc().deallocate(whole);

  // Remainder exactly 1 MiB: still not split.
  void* still_whole = alloc().allocate(3 * kMiB);
  EXPECT_EQ(memory_stats().allocated_bytes - base_.allocated_bytes, 4 * kMiB);
  alloc().deallocate(still_whole);

  // Remainder 1.5 MiB: split, and the remainder stays cached.
  void* part = alloc().allocate(2 * kMiB + 512 * kKiB);
  s = memory_stats();
  EXPECT_EQ(s.allocated_bytes - base_.allocated_bytes, 2 * kMiB + 512 * kKiB);
  EXPECT_EQ(s.largest_free_block, kMiB + 512 * kKiB);
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 4 * kMiB);
  EXPECT_EQ(s.num_segments - base_.num_segments, 1);
  alloc().deallocate(part);
  EXPECT_EQ(memory_stats().largest_free_block, 4 * kMiB);
}

TEST_F(AllocatorTest, PeaksTrackMaximaAndReset) {
  void* a = alloc().allocate(3 * kMiB);
  void* b = alloc().allocate(kKiB);
  alloc().deallocate(a);
  MemoryStats s = memory_stats();
  EXPECT_GE(s.peak_allocated_bytes, base_.allocated_bytes + 3 * kMiB + kKiB);
  EXPECT_GE(s.peak_reserved_bytes, base_.reserved_bytes + 5 * kMiB);

  reset_peak_stats();
  s = memory_stats();
  EXPECT_EQ(s.peak_allocated_bytes, base_.allocated_bytes + kKiB);
  EXPECT_EQ(s.peak_reserved_bytes, base_.reserved_bytes + 5 * kMiB);

  empty_cache();  // releases the free 3 MiB segment; the reserved peak keeps it until reset
  s = memory_stats();
  EXPECT_EQ(s.reserved_bytes, base_.reserved_bytes + 2 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, base_.reserved_bytes + 5 * kMiB);

  void* c = alloc().allocate(kKiB);
  s = memory_stats();
  EXPECT_EQ(s.peak_allocated_bytes, base_.allocated_bytes + 2 * kKiB);
  alloc().deallocate(b);
  alloc().deallocate(c);
  reset_peak_stats();
  s = memory_stats();
  EXPECT_EQ(s.peak_allocated_bytes, base_.allocated_bytes);
  EXPECT_EQ(s.peak_reserved_bytes, base_.reserved_bytes + 2 * kMiB);
}

TEST_F(AllocatorTest, EmptyCacheReleasesExactlyTheFreeSegments) {
  void* a = alloc().allocate(kMiB);  // a and b fill the first small segment
  void* b = alloc().allocate(kMiB);
  void* c = alloc().allocate(kMiB);  // opens a second small segment
  void* d = alloc().allocate(kKiB);  // shares the second segment with c
  void* large = alloc().allocate(3 * kMiB);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 7 * kMiB);
  EXPECT_EQ(s.num_segments - base_.num_segments, 3);

  alloc().deallocate(c);      // second segment is still partly used by d
  alloc().deallocate(large);  // large segment is entirely free
  empty_cache();
  s = memory_stats();
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 4 * kMiB);
  EXPECT_EQ(s.num_segments - base_.num_segments, 2);
  EXPECT_EQ(s.largest_free_block, kMiB);  // c's block; d separates it from the segment's tail

  alloc().deallocate(d);  // now the second segment is free too
  empty_cache();
  s = memory_stats();
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.num_segments - base_.num_segments, 1);
  EXPECT_EQ(s.largest_free_block, 0);

  alloc().deallocate(a);
  alloc().deallocate(b);
  empty_cache();
  s = memory_stats();
  EXPECT_EQ(s.reserved_bytes, base_.reserved_bytes);
  EXPECT_EQ(s.num_segments, base_.num_segments);
  EXPECT_EQ(s.allocated_bytes, base_.allocated_bytes);
}

TEST_F(AllocatorTest, MemoryLimitThrowsOutOfMemoryWithDiagnostics) {
  MemoryLimitGuard limit(static_cast<size_t>(base_.reserved_bytes + 4 * kMiB));
  EXPECT_EQ(alloc().memory_limit(), static_cast<size_t>(base_.reserved_bytes + 4 * kMiB));
  void* a = alloc().allocate(kMiB);
  void* b = alloc().allocate(kMiB);
  MemoryStats before = memory_stats();

  std::string message;
  try {
    alloc().allocate(3 * kMiB);
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  for (const char* part :
       {"out of memory", "3.00 MiB (3145728 bytes)", "with a limit of", "allocated", "reserved",
        "largest free block", "fragmentation", "empty_cache"})
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
  if (base_.reserved_bytes == 0) {  // run alone: the numbers are known exactly
    EXPECT_EQ(message,
              "[allocator] out of memory: tried to allocate 3.00 MiB (3145728 bytes) with a limit "
              "of 4.00 MiB; allocated 2.00 MiB, reserved 2.00 MiB, largest free block 0 B, "
              "fragmentation 0.00; call kiln::empty_cache() or lower the batch size");
  }

  // A failed request leaves no trace in the counters.
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(s.num_segments, before.num_segments);
  EXPECT_EQ(s.num_allocations, before.num_allocations);
  EXPECT_EQ(s.cache_misses, before.cache_misses);

  // Exactly up to the limit is fine.
  void* c = alloc().allocate(2 * kMiB);
  EXPECT_EQ(memory_stats().reserved_bytes - base_.reserved_bytes, 4 * kMiB);
  for (void* p : {a, b, c}) alloc().deallocate(p);
}

TEST_F(AllocatorTest, SmallRequestOverLimitNamesTheSegment) {
  MemoryLimitGuard limit(static_cast<size_t>(base_.reserved_bytes + kMiB));
  try {
    alloc().allocate(kKiB);
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("1.00 KiB (1024 bytes, in a new 2.00 MiB segment)"), std::string::npos)
        << message;
  }
}

TEST_F(AllocatorTest, MemoryLimitReleasesCachedSegmentsBeforeFailing) {
  MemoryLimitGuard limit(static_cast<size_t>(base_.reserved_bytes + 4 * kMiB));
  alloc().deallocate(alloc().allocate(3 * kMiB));  // leaves a cached, entirely free segment
  EXPECT_EQ(memory_stats().reserved_bytes - base_.reserved_bytes, 3 * kMiB);

  // 3 + 2 MiB would exceed the limit; dropping the cached segment makes room.
  void* p = alloc().allocate(kKiB);
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.num_segments - base_.num_segments, 1);
  EXPECT_EQ(s.cache_misses - base_.cache_misses, 2);
  alloc().deallocate(p);
}

TEST_F(AllocatorTest, FragmentationIsExact) {
  void* blocks[4];
  for (void*& p : blocks) p = alloc().allocate(512 * kKiB);  // fill one 2 MiB segment exactly
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes - base_.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.fragmentation, 0.0);

  // Two free 512 KiB blocks that cannot merge: the largest is half of the free memory.
  alloc().deallocate(blocks[0]);
  alloc().deallocate(blocks[2]);
  s = memory_stats();
  EXPECT_EQ(s.largest_free_block, 512 * kKiB);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.5);

  // Add a separate 1.5 MiB free region: largest 1.5 MiB of 2.5 MiB free.
  void* large = alloc().allocate(kMiB + 512 * kKiB);
  alloc().deallocate(large);
  s = memory_stats();
  EXPECT_EQ(s.largest_free_block, kMiB + 512 * kKiB);
  EXPECT_DOUBLE_EQ(s.fragmentation, 1.0 - 1.5 / 2.5);

  // Freeing the block between them merges all three into one 1.5 MiB block.
  alloc().deallocate(blocks[1]);
  empty_cache();
  s = memory_stats();
  EXPECT_EQ(s.largest_free_block, kMiB + 512 * kKiB);
  EXPECT_EQ(s.fragmentation, 0.0);
  alloc().deallocate(blocks[3]);
}

TEST_F(AllocatorTest, MemorySummaryHasTheKeyLines) {
  void* p = alloc().allocate(3 * kMiB);
  std::string summary = memory_summary();
  for (const char* line :
       {"Allocated memory", "Reserved memory", "Peak allocated memory", "Peak reserved memory",
        "Allocations", "Frees", "Cache hits", "Cache misses", "Cache hit rate", "Segments",
        "Largest free block", "Fragmentation", "MiB"})
    EXPECT_NE(summary.find(line), std::string::npos) << "missing '" << line << "' in:\n" << summary;
  EXPECT_GE(std::count(summary.begin(), summary.end(), '\n'), 13);
  alloc().deallocate(p);
}

TEST_F(AllocatorTest, ConcurrentAllocationsKeepStatsConsistent) {
  constexpr int kThreads = 2;
  constexpr int kIterations = 1000;
  auto work = [](int seed) {
    for (int i = 0; i < kIterations; ++i) {
      size_t n = 1 + static_cast<size_t>((i * 7919 + seed * 104729) % (64 * 1024));
      if (i % 100 == 0) n = 2 * kMiB + static_cast<size_t>(seed);  // large pool too
      auto* p = static_cast<unsigned char*>(alloc().allocate(n));
      p[0] = static_cast<unsigned char>(seed);
      p[n - 1] = static_cast<unsigned char>(i);
      alloc().deallocate(p);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (auto& t : threads) t.join();

  MemoryStats s = memory_stats();
  EXPECT_EQ(s.allocated_bytes, base_.allocated_bytes);
  EXPECT_EQ(s.num_allocations - base_.num_allocations, kThreads * kIterations);
  EXPECT_EQ(s.num_frees - base_.num_frees, kThreads * kIterations);
  EXPECT_EQ((s.cache_hits + s.cache_misses) - (base_.cache_hits + base_.cache_misses),
            kThreads * kIterations);
  // With everything freed, each cached segment is one whole free block.
  empty_cache();
  s = memory_stats();
  EXPECT_EQ(s.reserved_bytes, base_.reserved_bytes);
  EXPECT_EQ(s.num_segments, base_.num_segments);
  EXPECT_EQ(s.largest_free_block, 0);
}

TEST_F(AllocatorTest, UnknownPointerThrowsInternalError) {
  int on_stack = 0;
  EXPECT_THROW(alloc().deallocate(&on_stack), InternalError);
  void* p = alloc().allocate(2 * kKiB);
  EXPECT_THROW(alloc().deallocate(static_cast<char*>(p) + 512), InternalError);  // interior
  alloc().deallocate(p);
  EXPECT_THROW(alloc().deallocate(p), InternalError);  // double free
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.num_frees - base_.num_frees, 1);
  EXPECT_EQ(s.allocated_bytes, base_.allocated_bytes);
}

TEST_F(AllocatorTest, RequestOverflowingTheRoundingThrowsOutOfMemory) {
  try {
    alloc().allocate(std::numeric_limits<size_t>::max());
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("(18446744073709551615 bytes)"), std::string::npos) << message;
    EXPECT_EQ(message.find("limit"), std::string::npos) << message;
  }
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes, base_.reserved_bytes);
  EXPECT_EQ(s.num_allocations, base_.num_allocations);
}

TEST_F(AllocatorTest, FailedSystemAllocationThrowsOutOfMemory) {
  if (kSanitizedAllocator) GTEST_SKIP() << "the sanitizer runtime aborts on impossible allocations";
  try {
    alloc().allocate(size_t{1} << 62);
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("4.00 EiB (4611686018427387904 bytes)"), std::string::npos) << message;
    EXPECT_EQ(message.find("limit"), std::string::npos) << message;
    EXPECT_NE(message.find("fragmentation"), std::string::npos) << message;
  }
  MemoryStats s = memory_stats();
  EXPECT_EQ(s.reserved_bytes, base_.reserved_bytes);
  EXPECT_EQ(s.num_segments, base_.num_segments);
  EXPECT_EQ(s.num_allocations, base_.num_allocations);
}

}  // namespace
}  // namespace kiln
