#pragma once
// Private helpers for ops that run on oneDNN: one CPU engine, a stream per thread, and a small
// thread-safe LRU cache for primitives. Not part of the public surface (oneDNN is a private
// dependency of the kiln library).
#include <oneapi/dnnl/dnnl.hpp>

#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

namespace kiln {

// The process-wide CPU engine (created on first use).
dnnl::engine& dnnl_engine();
// An in-order stream on dnnl_engine() owned by the calling thread, so concurrent callers never
// share one.
dnnl::stream& dnnl_stream();
// oneDNN's data type for dt; nullopt where oneDNN has none (float64, bool, int64).
std::optional<dnnl::memory::data_type> dnnl_dtype(DType dt);

// Note [scratchpads]: in oneDNN's default scratchpad mode, primitives share one library-owned
// scratchpad unless oneDNN was built with DNNL_ENABLE_CONCURRENT_EXEC (Debian's is not), so two
// threads running primitives at once (DataLoader workers, user threads) could overwrite each
// other's temporaries. Every primitive kiln creates uses the attributes below
// (scratchpad_mode::user), and each execution passes its own scratchpad, allocated from the
// caching allocator by scratchpad_for.
dnnl::primitive_attr user_scratchpad_attr();
// A buffer of at least md.get_size() bytes, or an undefined Tensor when md is empty.
Tensor scratchpad_for(const dnnl::memory::desc& md);

// Note [primitive cache]: creating a oneDNN primitive JIT-compiles code (tens of microseconds to
// milliseconds), far more than running a small one, so each family keeps the primitives it built
// keyed by everything that shaped them (dims, strides, dtypes, attributes). The cache is bounded
// (least recently used entries go first) because shape-polymorphic workloads would otherwise grow
// it without limit. Executing a primitive from several threads at once is safe with per-call
// scratchpads (Note [scratchpads]), so the lock only guards the map.
template <class V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // Returns the entry for key, building it with make() on a miss. make runs outside the lock, so
  // two threads may both build an entry for the same key; the first one stored wins.
  template <class Make>
  V get_or_create(const std::string& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
    }
    V value = make();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    order_.emplace_front(key, value);
    index_[key] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return value;
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_.size();
  }

 private:
  using Entry = std::pair<std::string, V>;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, typename std::list<Entry>::iterator> index_;
};

}  // namespace kiln
