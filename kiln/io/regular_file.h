#pragma once
#include <cstdint>
#include <cstdio>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::io {

// Note [reading files]
// ~~~~~~~~~~~~~~~~~~~~
// Every reader of a user-named file (safetensors, checkpoints, IDX, CIFAR, CSV, images, pipeline
// caches) opens it here. open() of a FIFO blocks until a writer appears, and a device or a
// directory is no dataset, so the file is opened with O_NONBLOCK, checked with fstat to be a
// regular file, and only then switched back to blocking reads. A named pipe is an error naming
// the op, the file and the caller's line, never a hang.

// An open, read-only descriptor of a regular file; closed on destruction unless released.
class RegularFile {
 public:
  RegularFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  ~RegularFile();
  RegularFile(RegularFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  RegularFile& operator=(RegularFile&&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at the time it was opened
  // Hands the descriptor to the caller (gzdopen, fdopen), who closes it.
  int release();
  // A stdio stream over the descriptor (released to it); errors name op and the file.
  std::FILE* release_to_stdio(std::string_view op, const std::string& path,
                              const std::source_location& loc);

 private:
  int fd_;
  uint64_t size_;
};

RegularFile open_regular_file(const std::string& path, std::string_view op,
                              const std::source_location& loc);

// The whole file; larger than max_bytes is an error.
std::vector<uint8_t> read_regular_file(const std::string& path, std::string_view op,
                                       const std::source_location& loc,
                                       uint64_t max_bytes = UINT64_MAX);

// For writers: an existing path that is not a regular file (a FIFO, whose open for writing would
// block, a device, a directory) is an error; a missing one is fine.
void check_writable_path(const std::string& path, std::string_view op,
                         const std::source_location& loc);

}  // namespace kiln::io
