#include "kiln/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kiln::io {

namespace {

// The errno a test hook injects for `step`, or 0.
int injected_fault(std::string_view step, const std::string& path) {
  return atomic_file_faults().check(step, path);
}

std::string directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

FaultPoint& atomic_file_faults() {
  static auto* point = new FaultPoint();  // never destroyed: saves may run during exit
  return *point;
}

AtomicFile::AtomicFile(std::string path, std::string_view op, const std::source_location& loc)
    : path_(std::move(path)),
      temp_path_(path_ + ".tmp." + std::to_string(::getpid())),
      op_(op),
      loc_(loc) {
  if (path_.empty()) fail(op_, loc_, "expected a file path, but got an empty string");
  int err = injected_fault("open", path_);
  if (err == 0) {
    // No O_EXCL: a stale temp file of a crashed process that had the same pid is overwritten.
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) err = errno;
  }
  if (err != 0)
    fail(op_, loc_, "cannot create the temporary file '{}' for '{}': {}", temp_path_, path_,
         std::strerror(err));
}

AtomicFile::~AtomicFile() {
  discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::fail_with(int err, std::string_view what) {
  discard();
  fail(op_, loc_, "cannot {} '{}': {} (the previous file, if any, is unchanged)", what, path_,
       std::strerror(err));
}

void AtomicFile::write(const void* data, size_t n) {
  KILN_INTERNAL_ASSERT(fd_ >= 0 && !committed_, "AtomicFile::write after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    int err = injected_fault("write", path_);
    if (err != 0) fail_with(err, "write");
    size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    ssize_t got = ::write(fd_, p, chunk);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_with(errno, "write");
    }
    if (got == 0) fail_with(EIO, "write");
    p += got;
    n -= static_cast<size_t>(got);
    bytes_written_ += static_cast<uint64_t>(got);
  }
}

void AtomicFile::commit() {
  KILN_INTERNAL_ASSERT(fd_ >= 0 && !committed_, "AtomicFile::commit twice or after failure");
  int err = injected_fault("fsync", path_);
  if (err == 0 && ::fsync(fd_) != 0) err = errno;
  if (err != 0) fail_with(err, "flush to disk");

  err = injected_fault("close", path_);
  int fd = fd_;
  fd_ = -1;
  // close() reports deferred write errors on some filesystems (NFS), so it is checked too.
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) fail_with(err, "close");

  err = injected_fault("rename", path_);
  if (err == 0 && ::rename(temp_path_.c_str(), path_.c_str()) != 0) err = errno;
  if (err != 0) fail_with(err, "rename the temporary file over");
  committed_ = true;

  // Without this the rename may be lost on power failure even though the data is on disk.
  std::string dir = directory_of(path_);
  err = injected_fault("fsync_dir", path_);
  if (err == 0) {
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
      err = errno;
    } else {
      // Some filesystems cannot sync a directory (EINVAL); there is nothing more to do there.
      if (::fsync(dfd) != 0 && errno != EINVAL) err = errno;
      ::close(dfd);
    }
  }
  if (err != 0)
    fail(op_, loc_, "wrote '{}' but cannot flush its directory '{}' to disk: {}", path_, dir,
         std::strerror(err));
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes, std::string_view op,
                       const std::source_location& loc) {
  AtomicFile file(path, op, loc);
  file.write(bytes);
  file.commit();
}

}  // namespace kiln::io
