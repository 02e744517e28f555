#include "kiln/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <vector>

#include "kiln/io/regular_file.h"

namespace kiln::data {

namespace {

// A gzip-or-plain byte stream that knows its offset for error messages.
class Reader {
 public:
  Reader(const std::string& path, const Loc& loc) : path_(path), loc_(loc) {
    io::RegularFile file = io::open_regular_file(path, "read_idx", loc);
    file_ = gzdopen(file.fd(), "rb");
    if (!file_) fail("read_idx", loc, "cannot open '{}': {}", path, std::strerror(errno));
    file.release();  // gzclose closes it
  }
  ~Reader() { gzclose(file_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  void read(void* out, size_t n, const char* what) {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
      int got = gzread(file_, p, chunk);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        fail("read_idx", loc_, "corrupt file '{}' at byte offset {} while reading {}: {}", path_,
             offset_, what, msg);
      }
      if (got == 0)
        fail("read_idx", loc_, "truncated file '{}': ended at byte offset {} while reading {}",
             path_, offset_, what);
      p += got;
      n -= static_cast<size_t>(got);
      offset_ += static_cast<size_t>(got);
    }
  }
  bool at_end() {
    char c;
    return gzread(file_, &c, 1) == 0;
  }
  size_t offset() const { return offset_; }

 private:
  gzFile file_ = nullptr;
  std::string path_;
  Loc loc_;
  size_t offset_ = 0;
};

uint32_t big_endian32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

template <class T>
void swap_bytes(T* data, int64_t n) {
  if constexpr (sizeof(T) > 1) {
    for (int64_t i = 0; i < n; ++i) {
      unsigned char* b = reinterpret_cast<unsigned char*>(data + i);
      std::reverse(b, b + sizeof(T));
    }
  }
}

}  // namespace

Tensor read_idx(const std::string& path, const Loc& loc) {
  Reader in(path, loc);
  unsigned char magic[4];
  in.read(magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0)
    fail("read_idx", loc,
         "'{}' is not an IDX file: magic bytes at offset 0 are {:02x} {:02x}, "
         "expected 00 00",
         path, magic[0], magic[1]);
  int rank = magic[3];
  if (rank < 1 || rank > 8)
    fail("read_idx", loc, "'{}': expected 1 to 8 dimensions at offset 3, but got {}", path, rank);
  DType dt;
  size_t elem;
  switch (magic[2]) {
    case 0x08:
      dt = DType::UInt8;
      elem = 1;
      break;
    case 0x09:
      dt = DType::Int8;
      elem = 1;
      break;
    case 0x0B:
      dt = DType::Int32;
      elem = 2;
      break;
    case 0x0C:
      dt = DType::Int32;
      elem = 4;
      break;
    case 0x0D:
      dt = DType::Float32;
      elem = 4;
      break;
    case 0x0E:
      dt = DType::Float64;
      elem = 8;
      break;
    default:
      fail("read_idx", loc, "'{}': unknown IDX element type 0x{:02x} at offset 2", path, magic[2]);
  }
  Shape shape(rank);
  uint64_t numel = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char b[4];
    size_t at = in.offset();
    in.read(b, 4, "the dimensions");
    shape[d] = big_endian32(b);
    numel *= static_cast<uint64_t>(shape[d]);
    // IDX files of real datasets are far below this; a larger count means a corrupt header.
    if (numel * elem > (uint64_t{1} << 36))
      fail("read_idx", loc,
           "'{}': dimension {} at offset {} makes the data {} elements, which is "
           "implausibly large (corrupt header?)",
           path, d, at, numel);
  }
  Tensor out = empty(shape, {dt});
  if (elem == 2) {
    std::vector<int16_t> raw(numel);
    in.read(raw.data(), numel * 2, "the data");
    swap_bytes(raw.data(), static_cast<int64_t>(numel));
    int32_t* dst = out.data<int32_t>();
    for (uint64_t i = 0; i < numel; ++i) dst[i] = raw[i];
  } else {
    in.read(out.raw_data(), numel * elem, "the data");
    visit_dtype(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::endian::native == std::endian::little)
        swap_bytes(static_cast<T*>(out.raw_data()), static_cast<int64_t>(numel));
    });
  }
  if (!in.at_end())
    fail("read_idx", loc,
         "'{}': unexpected bytes after the data at offset {} (the header says {} "
         "elements)",
         path, in.offset(), numel);
  return out;
}

}  // namespace kiln::data
