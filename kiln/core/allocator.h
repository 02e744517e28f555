#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/core/error.h"

namespace kiln {

// Exact counters of the caching allocator. Sizes are of blocks as handed out (requests rounded up
// to kBlockRound bytes).
struct MemoryStats {
  int64_t allocated_bytes = 0;       // in blocks currently handed out
  int64_t reserved_bytes = 0;        // in segments obtained from the system
  int64_t peak_allocated_bytes = 0;  // since start or reset_peak_stats()
  int64_t peak_reserved_bytes = 0;
  int64_t num_allocations = 0;  // allocate() calls that returned memory
  int64_t num_frees = 0;
  int64_t cache_hits = 0;    // served from a cached free block
  int64_t cache_misses = 0;  // needed a new segment from the system
  int64_t num_segments = 0;
  int64_t largest_free_block = 0;  // largest cached free block, bytes
  // 1 - largest_free_block / (reserved - allocated); 0 when nothing is free. 0 means the free
  // memory is one block; near 1 means it is scattered in pieces too small for large requests.
  double fragmentation = 0.0;
};

// Thrown when a request cannot be served (within the limit, when one is set). detail() is the
// allocator's account without "[op]" and the call site, so that the op that allocated can rethrow
// it under its own name and the user's line (detail::empty_for, the dispatcher).
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& what, std::string detail)
      : Error(what), detail_(std::move(detail)) {}
  const std::string& detail() const { return detail_; }

 private:
  std::string detail_;
};

// Note [caching allocator]: every tensor byte comes from here. Requests are rounded up to 512 bytes
// and served from cached free blocks (best fit, split when the remainder is worth keeping) that
// live in segments obtained from the system: small requests (<= 1 MiB) share 2 MiB segments, larger
// ones get a segment of their rounded size. Freed blocks merge with free neighbours in the same
// segment. Memory returns to the system on empty_cache() and when a limit or the system refuses a
// new segment (whole free segments only). Segments of 2 MiB and more use huge pages (Note [huge
// pages] in allocator.cpp).
class CachingAllocator {
 public:
  static constexpr size_t kBlockRound = 512;
  static constexpr size_t kSmallRequest = 1 << 20;
  static constexpr size_t kSmallSegment = 2 << 20;
  static constexpr size_t kAlignment = 64;

  static CachingAllocator& instance();

  // Returns memory aligned to kAlignment; nullptr for 0 bytes. Throws OutOfMemoryError.
  void* allocate(size_t nbytes);
  void deallocate(void* ptr);

  MemoryStats stats() const;
  std::string memory_summary() const;
  void empty_cache();
  void reset_peak_stats();
  // 0 removes the limit. A limit bounds reserved bytes.
  void set_memory_limit(size_t bytes);
  size_t memory_limit() const;

  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

 private:
  ~CachingAllocator();
  CachingAllocator();
  struct Impl;
  Impl* impl_;
};

inline MemoryStats memory_stats() {
  return CachingAllocator::instance().stats();
}
inline std::string memory_summary() {
  return CachingAllocator::instance().memory_summary();
}
inline void empty_cache() {
  CachingAllocator::instance().empty_cache();
}
inline void reset_peak_stats() {
  CachingAllocator::instance().reset_peak_stats();
}
inline void set_memory_limit(size_t bytes) {
  CachingAllocator::instance().set_memory_limit(bytes);
}

}  // namespace kiln
