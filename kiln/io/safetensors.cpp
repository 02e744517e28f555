#include "kiln/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>

#include "kiln/core/grad_mode.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/file_error.h"
#include "kiln/io/regular_file.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::io {

namespace {

// Tensor bytes are copied as they are, so the host must share the format's byte order.
static_assert(std::endian::native == std::endian::little, "kiln needs a little-endian host");

using Json = nlohmann::ordered_json;

// The reference implementation's limit; real headers are kilobytes to a few megabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests three levels (header, entry, shape); deeper nesting is rejected while
// parsing so that a header of "[[[[..." cannot grow the parser's stacks.
constexpr int kMaxJsonDepth = 16;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::Float64, "F64"},   {DType::Float32, "F32"}, {DType::Float16, "F16"},
    {DType::BFloat16, "BF16"}, {DType::Int64, "I64"},   {DType::Int32, "I32"},
    {DType::Int8, "I8"},       {DType::UInt8, "U8"},    {DType::Bool, "BOOL"}};

std::optional<DType> safetensors_dtype_from_name(std::string_view name) {
  for (const DTypeName& d : kDTypeNames)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

// A name as it appears in messages: JSON-quoted (control bytes escaped) and clipped, since names
// come from untrusted files.
std::string show(std::string_view name) {
  constexpr size_t kMax = 80;
  std::string clipped(name.substr(0, kMax));
  std::string out = Json(clipped).dump(-1, ' ', false, Json::error_handler_t::replace);
  if (name.size() > kMax) out += "...";
  return out;
}

// The parser quotes the bytes it choked on, which may be anything; messages stay printable ASCII.
std::string printable(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return out;
}

using Reporter = FileErrorReporter;

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // relative to the data buffer
  uint64_t end = 0;
};

struct Header {
  std::vector<Entry> entries;  // header order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data buffer
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Checks the header length field against the file size; returns the data buffer's size.
uint64_t check_header_length(uint64_t n, uint64_t file_size, const Reporter& err) {
  if (n > kMaxHeaderBytes)
    err("the header length {} (the u64 at byte offset 0) exceeds the limit of {} bytes", n,
        kMaxHeaderBytes);
  if (n > file_size - 8)
    err("the header length {} (the u64 at byte offset 0) runs past the end of the file: only {} "
        "bytes follow byte offset 8",
        n, file_size - 8);
  return file_size - 8 - n;
}

Json parse_json(std::string_view text, const Reporter& err) {
  // Duplicate keys would silently keep the last value; one set of seen keys per open object.
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          err("the header nests JSON deeper than {} levels (a valid header nests 3)",
              kMaxJsonDepth);
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.back().insert(parsed.get<std::string>()).second)
          err("the header has the key {} twice in one object", show(parsed.get<std::string>()));
        break;
      case Json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::parse_error& e) {
    uint64_t at = 8 + (e.byte > 0 ? e.byte - 1 : 0);
    err("the header is not valid JSON (error near byte offset {}): {}", at, printable(e.what()));
  } catch (const Json::exception& e) {
    err("the header is not valid JSON: {}", printable(e.what()));
  }
}

// The dimension list of a "shape" value; checks types and that the element count and byte size
// fit in 64 bits (even with zero dims, since strides multiply the others).
Shape parse_shape(const std::string& name, const Json& value, DType dt, uint64_t& nbytes,
                  const Reporter& err) {
  if (!value.is_array())
    err("tensor {}: expected \"shape\" to be an array of non-negative integers, but got {}",
        show(name), value.dump());
  Shape shape;
  shape.reserve(value.size());
  int64_t strided = 1;  // product of max(dim, 1)
  bool has_zero = false;
  for (const Json& d : value) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t{INT64_MAX})
      err("tensor {}: expected \"shape\" to be an array of non-negative integers, but got {}",
          show(name), value.dump());
    int64_t dim = d.get<int64_t>();
    if (__builtin_mul_overflow(strided, std::max<int64_t>(dim, 1), &strided))
      err("tensor {}: shape {} has more elements than fit in 64 bits", show(name), value.dump());
    has_zero = has_zero || dim == 0;
    shape.push_back(dim);
  }
  uint64_t numel = has_zero ? 0 : static_cast<uint64_t>(strided);
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(itemsize(dt)), &nbytes))
    err("tensor {}: shape {} of dtype {} needs more bytes than fit in 64 bits", show(name),
        value.dump(), safetensors_dtype_name(dt));
  return shape;
}

Entry parse_entry(const std::string& name, const Json& value, uint64_t data_start,
                  uint64_t buffer_size, const Reporter& err) {
  if (!value.is_object())
    err("tensor {}: expected an object with keys \"dtype\", \"shape\", \"data_offsets\", but "
        "got {}",
        show(name), value.type_name());
  for (const auto& item : value.items())
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets")
      err("tensor {}: unexpected key {} (expected exactly \"dtype\", \"shape\", "
          "\"data_offsets\")",
          show(name), show(item.key()));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) err("tensor {}: missing key \"{}\"", show(name), key);

  Entry e;
  e.name = name;
  const Json& dt = value["dtype"];
  if (!dt.is_string())
    err("tensor {}: expected \"dtype\" to be a string, but got {}", show(name), dt.dump());
  std::optional<DType> dtype = safetensors_dtype_from_name(dt.get<std::string>());
  if (!dtype)
    err("tensor {}: unknown dtype {} (kiln reads F64, F32, F16, BF16, I64, I32, I8, U8, BOOL)",
        show(name), show(dt.get<std::string>()));
  e.dtype = *dtype;
  uint64_t nbytes = 0;
  e.shape = parse_shape(name, value["shape"], e.dtype, nbytes, err);

  const Json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    err("tensor {}: expected \"data_offsets\" to be [begin, end] with non-negative integers, but "
        "got {}",
        show(name), offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end)
    err("tensor {}: data_offsets [{}, {}] begin after they end", show(name), e.begin, e.end);
  if (e.end > buffer_size)
    err("tensor {}: data_offsets [{}, {}] run past the end of the {}-byte data buffer (file "
        "offset {} > file size {})",
        show(name), e.begin, e.end, buffer_size, data_start + e.end, data_start + buffer_size);
  if (e.end - e.begin != nbytes)
    err("tensor {}: dtype {} and shape {} need {} bytes, but data_offsets [{}, {}] hold {}",
        show(name), safetensors_dtype_name(e.dtype), shape_str(e.shape), nbytes, e.begin, e.end,
        e.end - e.begin);
  return e;
}

// The tensors must tile the data buffer exactly: no gaps (hidden bytes), no overlaps (aliasing).
void check_coverage(const std::vector<Entry>& entries, uint64_t data_start, uint64_t buffer_size,
                    const Reporter& err) {
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(entries[a].begin, entries[a].end) <
           std::pair(entries[b].begin, entries[b].end);
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (size_t i : order) {
    const Entry& e = entries[i];
    if (e.begin < covered)
      err("tensor {} (data_offsets [{}, {}]) overlaps tensor {} (data_offsets [{}, {}])",
          show(e.name), e.begin, e.end, show(prev->name), prev->begin, prev->end);
    if (e.begin > covered)
      err("bytes [{}, {}) of the data buffer (file offsets {} to {}) before tensor {} belong to "
          "no tensor",
          covered, e.begin, data_start + covered, data_start + e.begin, show(e.name));
    covered = e.end;
    prev = &e;
  }
  if (covered != buffer_size)
    err("the data buffer has {} bytes but the tensors cover only the first {}: the bytes from "
        "file offset {} on belong to no tensor",
        buffer_size, covered, data_start + covered);
}

Header parse_header(std::string_view text, uint64_t buffer_size, const Reporter& err) {
  Json json = parse_json(text, err);
  if (!json.is_object()) err("the header is a JSON {}, expected an object", json.type_name());
  Header h;
  h.data_start = 8 + text.size();
  for (const auto& item : json.items()) {
    const std::string& key = item.key();
    if (key == kMetadataKey) {
      if (!item.value().is_object())
        err("\"__metadata__\" is a JSON {}, expected an object of strings",
            item.value().type_name());
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string())
          err("\"__metadata__\" value of key {} is a JSON {}, expected a string", show(m.key()),
              m.value().type_name());
        h.metadata[m.key()] = m.value().get<std::string>();
      }
    } else if (key.starts_with("__")) {
      err("unexpected reserved key {} in the header (only \"__metadata__\" may start with __)",
          show(key));
    } else {
      h.entries.push_back(parse_entry(key, item.value(), h.data_start, buffer_size, err));
    }
  }
  check_coverage(h.entries, h.data_start, buffer_size, err);
  return h;
}

// A bool is one byte that must read 0 or 1 (any other value is undefined behavior in C++).
void check_bool_bytes(const Entry& e, const uint8_t* bytes, uint64_t data_start,
                      const Reporter& err) {
  if (e.dtype != DType::Bool) return;
  for (uint64_t i = 0; i < e.end - e.begin; ++i)
    if (bytes[i] > 1)
      err("tensor {} of dtype BOOL has the byte {} at file offset {}, expected 0 or 1",
          show(e.name), bytes[i], data_start + e.begin + i);
}

// Reads exactly n bytes at `offset`; fails naming the offset when the file is shorter.
void read_at(int fd, void* out, uint64_t n, uint64_t offset, const Reporter& err) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    ssize_t got = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      err("read error at byte offset {}: {}", offset, std::strerror(errno));
    }
    if (got == 0)
      err("the file ended at byte offset {} while {} more bytes were expected (did it change "
          "while being read?)",
          offset, n);
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

class FileCloser {
 public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() { ::close(fd_); }
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;

 private:
  int fd_;
};

// The padded header text for `tensors`, after checking that they can be written.
std::string build_header(const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata, const Reporter& err) {
  Json header = Json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) err("tensor {} is undefined", show(name));
    if (t.is_meta()) err("tensor {} has no memory to write: {}", show(name), t.describe());
    if (name.starts_with("__"))
      err("tensor name {} starts with \"__\", which the format reserves", show(name));
    if (!seen.insert(name).second) err("tensor name {} appears twice", show(name));
    uint64_t end = offset + t.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {
    err("tensor names and metadata must be valid UTF-8: {}", e.what());
  }
  // Aligns the data buffer to 8 bytes in the file (8-byte length field + padded header).
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxHeaderBytes)
    err("the header would be {} bytes, over the format's limit of {}", text.size(),
        kMaxHeaderBytes);
  return text;
}

void length_prefix(uint64_t n, uint8_t out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
}

// Calls write(ptr, n) with each tensor's bytes, making non-contiguous tensors contiguous one at
// a time so that at most one extra copy is alive.
template <class Write>
void write_data(const std::vector<std::pair<std::string, Tensor>>& tensors, Write&& write) {
  NoGradGuard no_grad;
  for (const auto& item : tensors) {
    const Tensor& t = item.second;
    if (t.numel() == 0) continue;
    Tensor c = contiguous(t);
    write(c.raw_data(), c.nbytes());
  }
}

}  // namespace

const char* safetensors_dtype_name(DType dt) {
  for (const DTypeName& d : kDTypeNames)
    if (d.dtype == dt) return d.name;
  KILN_INTERNAL_ASSERT(false, "dtype without a safetensors name");
  return "";
}

const Tensor& SafetensorsFile::at(const std::string& name, const Loc& loc) const {
  for (const auto& item : tensors)
    if (item.first == name) return item.second;
  std::string names;
  for (const auto& item : tensors) names += (names.empty() ? "" : ", ") + show(item.first);
  fail("safetensors", loc, "expected a tensor named {}, but the file holds [{}]", show(name),
       names);
}

std::vector<uint8_t> serialize_safetensors(
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata, const Loc& loc) {
  const std::string where = "<memory>";
  std::string header =
      build_header(tensors, metadata, Reporter("serialize_safetensors", where, loc));
  // Sized up front: GCC 12 at -O2 misreads insert() into an 8-byte vector as out of bounds.
  std::vector<uint8_t> out(8 + header.size());
  length_prefix(header.size(), out.data());
  std::copy(header.begin(), header.end(), out.begin() + 8);
  write_data(tensors, [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, const Loc& loc) {
  std::string header = build_header(tensors, metadata, Reporter("save_safetensors", path, loc));
  AtomicFile file(path, "save_safetensors", loc);
  uint8_t prefix[8];
  length_prefix(header.size(), prefix);
  file.write(prefix, 8);
  file.write(header.data(), header.size());
  write_data(tensors, [&](const void* p, size_t n) { file.write(p, n); });
  file.commit();
}

SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes,
                                  const std::string& name_for_errors, const Loc& loc) {
  Reporter err("parse_safetensors", name_for_errors, loc);
  if (bytes.size() < 8)
    err("the file is {} bytes, shorter than the 8-byte header length field", bytes.size());
  uint64_t n = read_u64_le(bytes.data());
  uint64_t buffer_size = check_header_length(n, bytes.size(), err);
  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  Header h = parse_header(text, buffer_size, err);
  const uint8_t* data = bytes.data() + h.data_start;
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  for (Entry& e : h.entries) {
    check_bool_bytes(e, data + e.begin, h.data_start, err);
    Tensor t = empty(e.shape, TensorOptions{e.dtype});
    if (e.end > e.begin) std::memcpy(t.raw_data(), data + e.begin, e.end - e.begin);
    out.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path, const Loc& loc) {
  Reporter err("load_safetensors", path, loc);
  RegularFile file = open_regular_file(path, "load_safetensors", loc);
  const int fd = file.fd();
  const uint64_t file_size = file.size();
  if (file_size < 8)
    err("the file is {} bytes, shorter than the 8-byte header length field", file_size);
  uint8_t prefix[8];
  read_at(fd, prefix, 8, 0, err);
  uint64_t n = read_u64_le(prefix);
  uint64_t buffer_size = check_header_length(n, file_size, err);
  // Bounded by kMaxHeaderBytes and by the file's real size (checked above).
  std::string text(n, '\0');
  read_at(fd, text.data(), n, 8, err);
  Header h = parse_header(text, buffer_size, err);
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  for (Entry& e : h.entries) {
    Tensor t = empty(e.shape, TensorOptions{e.dtype});
    if (e.end > e.begin) {
      read_at(fd, t.raw_data(), e.end - e.begin, h.data_start + e.begin, err);
      check_bool_bytes(e, static_cast<const uint8_t*>(t.raw_data()), h.data_start, err);
    }
    out.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

}  // namespace kiln::io
