#include "kiln/io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/core/error.h"

namespace kiln::io {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

}  // namespace

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

int RegularFile::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

std::FILE* RegularFile::release_to_stdio(std::string_view op, const std::string& path,
                                         const std::source_location& loc) {
  std::FILE* f = ::fdopen(fd_, "rb");
  if (!f) fail(op, loc, "cannot open '{}': {}", path, std::strerror(errno));
  fd_ = -1;
  return f;
}

RegularFile open_regular_file(const std::string& path, std::string_view op,
                              const std::source_location& loc) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(op, loc, "cannot open '{}': {}", path, std::strerror(errno));
  RegularFile file(fd, 0);
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(op, loc, "cannot stat '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail(op, loc, "cannot read '{}': it is {}, expected a regular file", path, kind_of(st.st_mode));
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
    fail(op, loc, "cannot read '{}': {}", path, std::strerror(errno));
  return RegularFile(file.release(), static_cast<uint64_t>(st.st_size));
}

std::vector<uint8_t> read_regular_file(const std::string& path, std::string_view op,
                                       const std::source_location& loc, uint64_t max_bytes) {
  RegularFile file = open_regular_file(path, op, loc);
  if (file.size() > max_bytes)
    fail(op, loc, "'{}' is {} bytes, more than the {} expected", path, file.size(), max_bytes);
  std::vector<uint8_t> bytes(file.size());
  uint64_t done = 0;
  while (done < bytes.size()) {
    ssize_t got = ::read(file.fd(), bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(op, loc, "cannot read '{}': {}", path, std::strerror(errno));
    if (got == 0)
      fail(op, loc, "'{}' ended at byte offset {}, before its size of {} bytes (truncated?)", path,
           done, bytes.size());
    done += static_cast<uint64_t>(got);
  }
  return bytes;
}

void check_writable_path(const std::string& path, std::string_view op,
                         const std::source_location& loc) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // missing (or unreadable: open reports it)
  if (!S_ISREG(st.st_mode))
    fail(op, loc, "cannot write '{}': it is {}, expected a regular file", path,
         kind_of(st.st_mode));
}

}  // namespace kiln::io
