#include "kiln/core/allocator.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory_resource>
#include <mutex>
#include <new>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln {

namespace {

// A piece of a segment. The blocks of one segment form a doubly linked list in address order,
// which is what lets a freed block find its neighbours to merge with.
struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  bool small = false;  // which pool the segment belongs to
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
};

// Best fit: the first block not smaller than the request; ties by address so that the order is
// total and lower_bound with a null-address key lands on the lowest address of a size.
struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return std::less<const char*>()(a->ptr, b->ptr);
  }
};

using FreeBlocks = std::pmr::set<Block*, BySizeThenAddress>;

std::string human_bytes(double bytes) {
  if (bytes < 1024.0) return fmt::format("{:.0f} B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = bytes / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

// Note [huge pages]: a segment of at least 2 MiB starts on a 2 MiB boundary and is advised
// MADV_HUGEPAGE, so Linux (with transparent huge pages in "madvise" or "always" mode, Debian's
// default being madvise) backs it with 2 MiB pages. Weights and activations are streamed through
// once per op; with 4 KiB pages, ResNet-18's 45 MB of weights span 11,000 pages, far more than the
// TLB holds, and every page of every weight missed it. Measured (kiln_profile --workload
// resnet18-infer --batch 1, 8 alternating pairs): 7.43 -> 6.62 ms per image. KILN_HUGE_PAGES=0
// turns it off. Sizes and statistics are unchanged.
void* system_alloc(size_t size) {
  constexpr size_t kHugePage = size_t(2) << 20;
  static const bool huge = [] {
    const char* v = std::getenv("KILN_HUGE_PAGES");
    return v == nullptr || std::string(v) != "0";
  }();
  if (!huge || size < kHugePage) return std::aligned_alloc(CachingAllocator::kAlignment, size);
  void* ptr = nullptr;
  if (posix_memalign(&ptr, kHugePage, size) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  madvise(ptr, size, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
#endif
  return ptr;
}

}  // namespace

// Fixed-size free lists for the allocator's bookkeeping (Note [allocator bookkeeping]): a request
// of up to kMaxNode bytes pops a node of its 16-byte class, carved from 4 KiB slabs that are
// released only with the resource; larger requests (hash buckets) go to global new. Not
// thread-safe: the allocator's mutex guards it. (std::pmr::unsynchronized_pool_resource does the
// same job but measured slower than malloc here: its deallocate searches for the owning chunk.)
class NodeResource final : public std::pmr::memory_resource {
 public:
  NodeResource() = default;
  NodeResource(const NodeResource&) = delete;
  NodeResource& operator=(const NodeResource&) = delete;
  ~NodeResource() override {
    for (void* slab : slabs_) ::operator delete(slab);
  }

 private:
  static constexpr size_t kQuantum = 16;
  static constexpr size_t kMaxNode = 128;
  static constexpr size_t kSlab = 4096;
  struct FreeNode {
    FreeNode* next;
  };

  void* do_allocate(size_t bytes, size_t align) override {
    if (bytes > kMaxNode || align > kQuantum) return ::operator new(bytes, std::align_val_t(align));
    const size_t cls = (bytes + kQuantum - 1) / kQuantum;
    if (!free_[cls]) refill(cls);
    FreeNode* node = free_[cls];
    free_[cls] = node->next;
    return node;
  }
  void do_deallocate(void* p, size_t bytes, size_t align) override {
    if (bytes > kMaxNode || align > kQuantum) return ::operator delete(p, std::align_val_t(align));
    const size_t cls = (bytes + kQuantum - 1) / kQuantum;
    free_[cls] = new (p) FreeNode{free_[cls]};
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }
  void refill(size_t cls) {
    char* slab = static_cast<char*>(::operator new(kSlab));
    slabs_.push_back(slab);
    const size_t node = cls * kQuantum;
    for (size_t off = 0; off + node <= kSlab; off += node)
      free_[cls] = new (slab + off) FreeNode{free_[cls]};
  }

  FreeNode* free_[kMaxNode / kQuantum + 1] = {};
  std::vector<void*> slabs_;
};

// Note [allocator bookkeeping]: the blocks and the nodes of the free sets and of the address map
// come from free lists (NodeResource, guarded by the allocator's mutex like everything else),
// not from malloc: an eager op allocates and frees one tensor, and with global new that cost four
// mallocs and four frees of bookkeeping per tensor (measured with a counting malloc: 14 mallocs
// per eager 1-element add, 10 with the free lists). Only kiln's own bookkeeping lives there;
// tensor memory and its statistics are unchanged.
struct CachingAllocator::Impl {
  mutable std::mutex mutex_;
  NodeResource nodes_;  // declared first: outlives the containers
  FreeBlocks small_free_{&nodes_};
  FreeBlocks large_free_{&nodes_};
  std::pmr::unordered_map<void*, Block*> active_{&nodes_};  // handed-out blocks by address
  MemoryStats stats_;  // largest_free_block and fragmentation are derived in snapshot()
  size_t limit_ = 0;

  ~Impl() {
    // Only segment heads own system memory; a head is a block without a predecessor.
    std::vector<Block*> heads;
    for (auto* pool : {&small_free_, &large_free_})
      for (Block* b : *pool)
        if (!b->prev) heads.push_back(b);
    for (auto& entry : active_)
      if (!entry.second->prev) heads.push_back(entry.second);
    for (Block* head : heads) {
      std::free(head->ptr);
      for (Block* b = head; b;) drop_block(std::exchange(b, b->next));
    }
  }

  Block* make_block(const Block& value) {
    return std::pmr::polymorphic_allocator<Block>(&nodes_).new_object<Block>(value);
  }
  void drop_block(Block* b) { std::pmr::polymorphic_allocator<Block>(&nodes_).delete_object(b); }

  static size_t round_up(size_t nbytes) {
    return (nbytes + kBlockRound - 1) / kBlockRound * kBlockRound;
  }

  FreeBlocks& pool_of(const Block* b) { return b->small ? small_free_ : large_free_; }

  MemoryStats snapshot() const {
    MemoryStats s = stats_;
    for (const FreeBlocks* pool : {&small_free_, &large_free_})
      if (!pool->empty())
        s.largest_free_block =
            std::max(s.largest_free_block, static_cast<int64_t>((*pool->rbegin())->size));
    int64_t free_bytes = s.reserved_bytes - s.allocated_bytes;
    if (free_bytes > 0)
      s.fragmentation = 1.0 - static_cast<double>(s.largest_free_block) / free_bytes;
    return s;
  }

  [[noreturn]] void throw_oom(size_t nbytes, size_t segment_size, bool hit_limit) const {
    MemoryStats s = snapshot();
    // A small request needs a whole 2 MiB segment, which is why a tiny request can fail; say so.
    std::string segment_note;
    if (segment_size > round_up(nbytes))
      segment_note = fmt::format(", in a new {} segment", human_bytes(segment_size));
    std::string limit_note =
        hit_limit ? fmt::format(" with a limit of {}", human_bytes(limit_)) : "";
    std::string detail = fmt::format(
        "out of memory: tried to allocate {} ({} bytes{}){}; allocated {}, reserved {}, largest "
        "free block {}, fragmentation {:.2f}; call kiln::empty_cache() or lower the batch size",
        human_bytes(nbytes), nbytes, segment_note, limit_note, human_bytes(s.allocated_bytes),
        human_bytes(s.reserved_bytes), human_bytes(s.largest_free_block), s.fragmentation);
    throw OutOfMemoryError("[allocator] " + detail, detail);
  }

  // Returns every segment that is one free block (no neighbours) to the system.
  void release_free_segments() {
    for (auto* pool : {&small_free_, &large_free_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next) {
          ++it;
          continue;
        }
        it = pool->erase(it);
        std::free(b->ptr);
        stats_.reserved_bytes -= static_cast<int64_t>(b->size);
        --stats_.num_segments;
        drop_block(b);
      }
    }
  }

  Block* new_segment(size_t nbytes, size_t segment_size, bool small) {
    auto fits = [&] {
      auto reserved = static_cast<size_t>(stats_.reserved_bytes);
      return limit_ == 0 || (reserved <= limit_ && segment_size <= limit_ - reserved);
    };
    if (!fits()) release_free_segments();
    if (!fits()) throw_oom(nbytes, segment_size, /*hit_limit=*/true);
    void* ptr = system_alloc(segment_size);
    if (!ptr) {
      // Cached segments the system could hand back to us are worth one more try.
      release_free_segments();
      ptr = system_alloc(segment_size);
    }
    if (!ptr) throw_oom(nbytes, segment_size, /*hit_limit=*/false);
    stats_.reserved_bytes += static_cast<int64_t>(segment_size);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    ++stats_.num_segments;
    return make_block({.ptr = static_cast<char*>(ptr), .size = segment_size, .small = small});
  }

  void maybe_split(Block* block, size_t size) {
    size_t remainder = block->size - size;
    // A large-pool remainder of at most kSmallRequest could only ever serve small requests, which
    // live in the other pool, so it stays part of the handed-out block.
    bool split = block->small ? remainder >= kBlockRound : remainder > kSmallRequest;
    if (!split) return;
    Block* rest = make_block({.ptr = block->ptr + size,
                              .size = remainder,
                              .small = block->small,
                              .prev = block,
                              .next = block->next});
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool_of(rest).insert(rest);
  }

  void* allocate(size_t nbytes) {
    if (nbytes > std::numeric_limits<size_t>::max() - kBlockRound)
      throw_oom(nbytes, /*segment_size=*/0, /*hit_limit=*/false);
    size_t size = round_up(nbytes);
    bool small = size <= kSmallRequest;
    FreeBlocks& pool = small ? small_free_ : large_free_;
    Block key{.size = size};
    Block* block = nullptr;
    if (auto it = pool.lower_bound(&key); it != pool.end()) {
      block = *it;
      pool.erase(it);
      ++stats_.cache_hits;
    } else {
      block = new_segment(nbytes, small ? kSmallSegment : size, small);
      ++stats_.cache_misses;
    }
    maybe_split(block, size);
    block->allocated = true;
    active_.emplace(block->ptr, block);
    stats_.allocated_bytes += static_cast<int64_t>(block->size);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.num_allocations;
    return block->ptr;
  }

  void deallocate(void* ptr) {
    auto it = active_.find(ptr);
    if (it == active_.end())
      throw InternalError(fmt::format(
          "[allocator] deallocate of {}, which is not a live allocation of the caching allocator "
          "(double free, or memory from elsewhere)",
          ptr));
    Block* block = it->second;
    active_.erase(it);
    block->allocated = false;
    stats_.allocated_bytes -= static_cast<int64_t>(block->size);
    ++stats_.num_frees;
    FreeBlocks& pool = pool_of(block);
    if (Block* prev = block->prev; prev && !prev->allocated) {
      pool.erase(prev);
      prev->size += block->size;
      prev->next = block->next;
      if (block->next) block->next->prev = prev;
      drop_block(std::exchange(block, prev));
    }
    if (Block* next = block->next; next && !next->allocated) {
      pool.erase(next);
      block->size += next->size;
      block->next = next->next;
      if (next->next) next->next->prev = block;
      drop_block(next);
    }
    pool.insert(block);
  }

  std::string summary() const {
    MemoryStats s = snapshot();
    int64_t requests = s.cache_hits + s.cache_misses;
    double hit_rate = requests > 0 ? 100.0 * static_cast<double>(s.cache_hits) / requests : 0.0;
    std::string rule(48, '=');
    std::string out = fmt::format("|{}|\n|{:^48}|\n|{}|\n", rule, "kiln CPU memory summary", rule);
    auto row = [&out](std::string_view name, const std::string& value) {
      out += fmt::format("| {:<26}{:>20} |\n", name, value);
    };
    row("Allocated memory", human_bytes(s.allocated_bytes));
    row("Reserved memory", human_bytes(s.reserved_bytes));
    row("Peak allocated memory", human_bytes(s.peak_allocated_bytes));
    row("Peak reserved memory", human_bytes(s.peak_reserved_bytes));
    row("Memory limit", limit_ ? human_bytes(limit_) : "none");
    row("Allocations", std::to_string(s.num_allocations));
    row("Frees", std::to_string(s.num_frees));
    row("Cache hits", std::to_string(s.cache_hits));
    row("Cache misses", std::to_string(s.cache_misses));
    row("Cache hit rate", fmt::format("{:.2f}%", hit_rate));
    row("Segments", std::to_string(s.num_segments));
    row("Largest free block", human_bytes(s.largest_free_block));
    row("Fragmentation", fmt::format("{:.2f}", s.fragmentation));
    out += fmt::format("|{}|\n", rule);
    return out;
  }
};

CachingAllocator& CachingAllocator::instance() {
  // Leaked on purpose: tensors destroyed during static destruction still free into it.
  static auto* allocator = new CachingAllocator();
  return *allocator;
}

CachingAllocator::CachingAllocator() : impl_(new Impl()) {}

CachingAllocator::~CachingAllocator() {
  delete impl_;
}

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->allocate(nbytes);
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->deallocate(ptr);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->snapshot();
}

std::string CachingAllocator::memory_summary() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->summary();
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->release_free_segments();
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->stats_.peak_allocated_bytes = impl_->stats_.allocated_bytes;
  impl_->stats_.peak_reserved_bytes = impl_->stats_.reserved_bytes;
}

void CachingAllocator::set_memory_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->limit_ = bytes;
}

size_t CachingAllocator::memory_limit() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->limit_;
}

}  // namespace kiln
