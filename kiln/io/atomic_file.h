#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "kiln/core/error.h"
#include "kiln/io/fault_injection.h"

namespace kiln::io {

// Note [atomic write]: a checkpoint that is being overwritten must never be left half-written,
// whatever happens (full disk, crash, power loss). So the bytes go to "<path>.tmp.<pid>" beside
// the target, the temp file is fsync'ed, renamed over the target (rename within one directory is
// atomic on POSIX), and the directory is fsync'ed so the rename itself is durable. Readers see
// either the old file or the new one, never a mix. On any failure before the rename the temp
// file is removed and the target is untouched.
//
// The temp name holds the pid, so two processes never collide; two threads of one process
// writing the same path at the same time are not supported. A symlink at `path` is replaced by
// the new file (the link's target is left alone); the new file gets the default permissions
// (0666 minus the umask), not those of the file it replaces.
class AtomicFile {
 public:
  // Creates the temp file. `op` names the caller in error messages ("[op] cannot ...").
  explicit AtomicFile(std::string path, std::string_view op = "atomic_write",
                      const std::source_location& loc = std::source_location::current());
  // Removes the temp file unless commit() succeeded. Never throws.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::span<const uint8_t> bytes) { write(bytes.data(), bytes.size()); }
  // fsync, rename over the target, fsync the directory. The file is final once this returns.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  // Removes the temp file and throws "[op] cannot <what> '<path>': <errno text> ...".
  [[noreturn]] void fail_with(int err, std::string_view what);
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  std::string op_;
  std::source_location loc_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t bytes_written_ = 0;
};

// Writes `bytes` to `path` atomically (see Note [atomic write]).
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes,
                       std::string_view op = "write_file_atomic",
                       const std::source_location& loc = std::source_location::current());

// Fault injection for tests (Note [fault injection]): the point is asked before each step of an
// atomic write, with the step's name ("open", "write", "fsync", "close", "rename", "fsync_dir")
// and the target path.
using AtomicFileFaultHook = FaultHook;
FaultPoint& atomic_file_faults();
inline void set_atomic_file_fault_hook(AtomicFileFaultHook hook) {
  atomic_file_faults().set(std::move(hook));
}

// Installs a fault hook for the lifetime of the guard (tests).
class ScopedAtomicFileFault : public ScopedFault {
 public:
  explicit ScopedAtomicFileFault(AtomicFileFaultHook hook)
      : ScopedFault(atomic_file_faults(), std::move(hook)) {}
};

}  // namespace kiln::io
