#pragma once
#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>

#include "kiln/core/device.h"

namespace kiln {

// Memory shared by a tensor and its views. Also carries the version counter used by autograd to
// detect in-place modification of saved tensors, and who did the last modification.
class Storage {
 public:
  // Allocates nbytes from the caching allocator (cpu) or nothing (meta).
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  // Called by every in-place op; remembers the op and its call site for error messages.
  void bump_version(std::string op, const std::source_location& loc) {
    ++version_;
    last_writer_op_ = std::move(op);
    last_writer_loc_ = loc;
  }
  // Bumped when an in-place op rewrites the autograd history of a tensor on this storage; views
  // made before that point carry a stale grad_fn (see Note [stale views]).
  uint64_t history_version() const { return history_version_; }
  void bump_history_version() { ++history_version_; }
  const std::string& last_writer_op() const { return last_writer_op_; }
  const std::source_location& last_writer_loc() const { return last_writer_loc_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
  uint64_t history_version_ = 0;
  std::string last_writer_op_;
  std::source_location last_writer_loc_;
};

}  // namespace kiln
