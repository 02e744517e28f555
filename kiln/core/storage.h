#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>

#include "kiln/core/call_site.h"
#include "kiln/core/device.h"

namespace kiln {

class AllocationSession;

// Note [deferred contents]: a producer may leave a storage's memory unwritten and attach what it
// holds in another form (a oneDNN blocked layout, Note [blocked activations] in
// backend/onednn/conv_blocked_activation.cpp). Deferring gives the storage's memory back (the
// producer has not written it and nobody else has seen it: the storage is the producer's fresh
// output), so a pending tensor holds only the other form. The first data() call, whoever makes
// it, allocates the memory again and writes the plain contents (once, under a lock) and drops the
// other form, so every reader and writer of the memory sees ordinary contents. A consumer that
// understands the other form can take it from deferred() without calling data(), and the plain
// contents are then never allocated nor written if nobody else reads them.
class DeferredContents {
 public:
  virtual ~DeferredContents() = default;
  // Writes the plain contents into `data`, the storage's memory.
  virtual void write(void* data) const = 0;
};

// Memory shared by a tensor and its views. Also carries the version counter used by autograd to
// detect in-place modification of saved tensors, and who did the last modification.
class Storage {
 public:
  // Allocates nbytes from the caching allocator (cpu) or nothing (meta); from this thread's
  // allocation session instead when one is current (Note [allocation sessions]). The same goes
  // for the memory that deferred contents are written into.
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The memory, with its contents written (Note [deferred contents]).
  void* data() const {
    if (deferred_.load(std::memory_order_acquire)) [[unlikely]]
      write_deferred();
    return data_;
  }
  // The memory's address, its contents left as they are (for identity checks); null while the
  // contents are deferred.
  const void* address() const {
    return deferred_.load(std::memory_order_acquire) ? nullptr : data_;
  }
  // Leaves the contents to `contents` until the first data() call.
  void defer(std::shared_ptr<const DeferredContents> contents);
  // The contents not yet written, or null.
  std::shared_ptr<const DeferredContents> deferred() const;
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  // Called by every in-place op; remembers the op and its call site for error messages.
  void bump_version(std::string op, const std::source_location& loc) {
    ++version_;
    last_writer_op_ = std::move(op);
    last_writer_loc_ = user_location(loc);  // an in-place op inside a layer: the user's line
  }
  // Bumped when an in-place op rewrites the autograd history of a tensor on this storage; views
  // made before that point carry a stale grad_fn (see Note [stale views]).
  uint64_t history_version() const { return history_version_; }
  void bump_history_version() { ++history_version_; }
  const std::string& last_writer_op() const { return last_writer_op_; }
  const std::source_location& last_writer_loc() const { return last_writer_loc_; }

 private:
  void write_deferred() const;
  void allocate_memory() const;
  void free_memory() const;

  // Written again only under deferred_mutex_, while the contents are deferred.
  mutable void* data_ = nullptr;
  mutable std::shared_ptr<AllocationSession>
      session_;  // where data_ came from, if not the allocator
  mutable int64_t ticket_ = 0;
  mutable std::atomic<bool> deferred_{false};
  mutable std::mutex deferred_mutex_;
  mutable std::shared_ptr<const DeferredContents> contents_;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
  uint64_t history_version_ = 0;
  std::string last_writer_op_;
  std::source_location last_writer_loc_;
};

}  // namespace kiln
