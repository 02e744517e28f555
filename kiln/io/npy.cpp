#include "kiln/io/npy.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "kiln/core/grad_mode.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/file_error.h"
#include "kiln/io/python_literal.h"
#include "kiln/io/regular_file.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::io {

namespace {

// Little-endian data is copied as it is (and big-endian data swapped), so the host must be little
// endian, as for safetensors.
static_assert(std::endian::native == std::endian::little, "kiln needs a little-endian host");

constexpr std::string_view kMagic("\x93NUMPY", 6);
// Magic, version and the longest (u32) header length field.
constexpr size_t kMaxPreambleBytes = 12;
// Headers of plain arrays are well under a kilobyte (NumPy's own reader refuses more than 10,000
// bytes by default). The cap bounds what a hostile length field can make kiln read and parse.
constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 20;
// NumPy 2's NPY_MAXDIMS (NumPy 1 allows 32).
constexpr size_t kMaxRank = 64;
// NumPy aligns the data to 64 bytes so that it can be memory-mapped for any vector width.
constexpr size_t kAlign = 64;

using Reporter = FileErrorReporter;

// A shape as Python prints a tuple: (), (3,), (2, 3).
std::string tuple_str(const Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

// --- the header's meaning -------------------------------------------------------------------

using Kind = PyLiteral::Kind;

struct DescrCode {
  const char* code;  // 'descr' without its byte-order character
  DType dtype;
};
constexpr DescrCode kDescrCodes[] = {
    {"f2", DType::Float16}, {"f4", DType::Float32}, {"f8", DType::Float64}, {"u1", DType::UInt8},
    {"i1", DType::Int8},    {"i4", DType::Int32},   {"i8", DType::Int64},   {"b1", DType::Bool}};

struct NpyHeader {
  std::string descr;
  DType dtype = DType::Float32;
  bool swap = false;  // big-endian elements
  bool fortran = false;
  Shape shape;
  uint64_t nbytes = 0;
};

void parse_descr(const PyLiteral& v, NpyHeader& h, const Reporter& err) {
  if (v.kind == Kind::kList)
    err("structured dtypes are not supported: 'descr' at byte offset {} is the field list {}; "
        "kiln reads arrays of one plain dtype",
        v.offset, py_repr(v));
  if (v.kind != Kind::kString)
    err("expected 'descr' to be a dtype string such as '<f4', but got {} at byte offset {}",
        py_repr(v), v.offset);
  const std::string& s = v.text;
  const bool has_order = !s.empty() && std::strchr("<>|=", s[0]) != nullptr;
  const std::string_view code = std::string_view(s).substr(has_order ? 1 : 0);
  if (code.starts_with("O"))
    err("object arrays ('descr': '{}' at byte offset {}) are not supported: their elements are "
        "pickled Python objects, and loading never executes code",
        py_escape(s), v.offset);
  h.descr = s;
  if (has_order)
    for (const DescrCode& d : kDescrCodes) {
      if (code != d.code) continue;
      h.dtype = d.dtype;
      if (itemsize(d.dtype) == 1) return;  // no byte order to honor
      if (s[0] == '|')
        err("dtype '{}' at byte offset {} has no byte order ('|'), but its elements have {} bytes; "
            "expected '<{}' or '>{}'",
            py_escape(s), v.offset, itemsize(d.dtype), d.code, d.code);
      h.swap = s[0] == '>';
      return;
    }
  err("unsupported dtype '{}' ('descr' at byte offset {}): kiln reads '<f2', '<f4', '<f8', '|u1', "
      "'|i1', '<i4', '<i8', '|b1' and their big-endian forms; convert the array with astype() "
      "in NumPy first",
      py_escape(s), v.offset);
}

void parse_shape(const PyLiteral& v, NpyHeader& h, const Reporter& err) {
  if (v.kind != Kind::kTuple)
    err("expected 'shape' to be a tuple of non-negative integers such as (2, 3), but got {} at "
        "byte offset {}",
        py_repr(v), v.offset);
  if (v.items.size() > kMaxRank)
    err("'shape' at byte offset {} has {} dimensions, more than the {} kiln reads", v.offset,
        v.items.size(), kMaxRank);
  int64_t strided = 1;  // product of max(dim, 1): strides must fit even when a dim is 0
  bool has_zero = false;
  for (const PyLiteral& d : v.items) {
    if (d.kind != Kind::kInt)
      err("expected 'shape' to be a tuple of non-negative integers, but got {} at byte offset {}",
          py_repr(v), v.offset);
    if (d.number < 0)
      err("'shape' {} has the negative dimension {} at byte offset {}", py_repr(v), d.number,
          d.offset);
    if (__builtin_mul_overflow(strided, std::max<int64_t>(d.number, 1), &strided))
      err("'shape' {} at byte offset {} has more elements than fit in 64 bits", py_repr(v),
          v.offset);
    has_zero = has_zero || d.number == 0;
    h.shape.push_back(d.number);
  }
  const uint64_t numel = has_zero ? 0 : static_cast<uint64_t>(strided);
  if (__builtin_mul_overflow(numel, uint64_t{itemsize(h.dtype)}, &h.nbytes) ||
      h.nbytes > uint64_t{INT64_MAX})
    err("'shape' {} of dtype '{}' needs more bytes than fit in 64 bits", py_repr(v),
        py_escape(h.descr));
}

NpyHeader parse_header(std::string_view text, uint64_t header_start, const Reporter& err) {
  PyLiteral dict;
  try {
    dict = parse_py_literal(text, header_start);
  } catch (const PyLiteralError& e) {
    err("the header is not a valid Python dict literal: {}", e.what());
  }
  if (dict.kind != Kind::kDict)
    err("the header is {} at byte offset {}, expected a dict literal with the keys 'descr', "
        "'fortran_order' and 'shape'",
        py_repr(dict), dict.offset);
  const char* const names[3] = {"descr", "fortran_order", "shape"};
  const PyLiteral* keys[3] = {nullptr, nullptr, nullptr};
  const PyLiteral* values[3] = {nullptr, nullptr, nullptr};
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const PyLiteral& key = dict.items[i];
    const auto* slot = key.kind != Kind::kString
                           ? std::end(names)
                           : std::find(std::begin(names), std::end(names), key.text);
    if (slot == std::end(names))
      err("the header has the unexpected key {} at byte offset {} (expected exactly 'descr', "
          "'fortran_order' and 'shape')",
          py_repr(key), key.offset);
    const size_t k = static_cast<size_t>(slot - std::begin(names));
    if (keys[k] != nullptr)
      err("the header has the key '{}' twice (at byte offsets {} and {})", names[k],
          keys[k]->offset, key.offset);
    keys[k] = &key;
    values[k] = &dict.items[i + 1];
  }
  for (size_t k = 0; k < 3; ++k)
    if (values[k] == nullptr)
      err("the header has no key '{}' (expected 'descr', 'fortran_order' and 'shape'), got {}",
          names[k], py_repr(dict));
  NpyHeader h;
  parse_descr(*values[0], h, err);
  if (values[1]->kind != Kind::kBool)
    err("expected 'fortran_order' to be True or False, but got {} at byte offset {}",
        py_repr(*values[1]), values[1]->offset);
  h.fortran = values[1]->flag;
  parse_shape(*values[2], h, err);
  return h;
}

// --- the file around it ---------------------------------------------------------------------

struct Preamble {
  int major = 0;
  uint64_t header_start = 0;
  uint64_t header_length = 0;
};

// `head` holds the file's first min(file_size, kMaxPreambleBytes) bytes.
Preamble parse_preamble(std::span<const uint8_t> head, uint64_t file_size, const Reporter& err) {
  const std::string_view got(reinterpret_cast<const char*>(head.data()),
                             std::min(head.size(), kMagic.size()));
  if (got != kMagic.substr(0, got.size()))
    err("not a NumPy .npy file: expected the magic string '\\x93NUMPY' at byte offset 0, but got "
        "'{}'",
        py_escape(got));
  if (file_size < 8)
    err("truncated: the file is {} bytes and ends inside the magic string and version (bytes 0 "
        "to 7)",
        file_size);
  Preamble p;
  p.major = head[6];
  if (p.major < 1 || p.major > 3 || head[7] != 0)
    err("unsupported format version {}.{} (the bytes at offsets 6 and 7); kiln reads versions "
        "1.0, 2.0 and 3.0",
        head[6], head[7]);
  const size_t length_bytes = p.major == 1 ? 2 : 4;
  p.header_start = 8 + length_bytes;
  if (file_size < p.header_start)
    err("truncated: the file is {} bytes and ends inside the header length (a little-endian u{} "
        "at byte offset 8)",
        file_size, 8 * length_bytes);
  for (size_t i = length_bytes; i-- > 0;) p.header_length = (p.header_length << 8) | head[8 + i];
  if (p.header_length > kMaxHeaderBytes)
    err("the header length {} (the u{} at byte offset 8) exceeds kiln's limit of {} bytes",
        p.header_length, 8 * length_bytes, kMaxHeaderBytes);
  if (p.header_length > file_size - p.header_start)
    err("truncated: the header length {} (the u{} at byte offset 8) runs past the end of the "
        "file: only {} bytes follow byte offset {}",
        p.header_length, 8 * length_bytes, file_size - p.header_start, p.header_start);
  return p;
}

// The data must fill the rest of the file exactly.
void check_data_size(const NpyHeader& h, uint64_t data_start, uint64_t file_size,
                     const Reporter& err) {
  const uint64_t have = file_size - data_start;
  if (have < h.nbytes)
    err("truncated: dtype '{}' and shape {} need {} data bytes from byte offset {}, but the file "
        "ends at byte offset {} ({} bytes of data)",
        py_escape(h.descr), tuple_str(h.shape), h.nbytes, data_start, file_size, have);
  if (have > h.nbytes)
    err("{} trailing {}: dtype '{}' and shape {} need {} data bytes from byte offset {}, "
        "ending at byte offset {}, but the file is {} bytes",
        have - h.nbytes, have - h.nbytes == 1 ? "byte" : "bytes", py_escape(h.descr),
        tuple_str(h.shape), h.nbytes, data_start, data_start + h.nbytes, file_size);
}

// Where the stored elements go first: the final tensor, or for a non-empty Fortran-order array
// of rank > 1 a flat buffer that finish() reorders.
Tensor storage_for(const NpyHeader& h, const Loc& loc) {
  const bool reorder = h.fortran && h.shape.size() > 1 && h.nbytes > 0;
  const Shape shape = reorder ? Shape{shape_numel(h.shape)} : h.shape;
  return detail::empty_for("read_npy", shape, TensorOptions{h.dtype}, loc);
}

// Copies the column-major elements of `shape` at src into row-major order at dst, one
// N-byte element at a time (memcpy keeps the copy free of type punning).
template <size_t N>
void gather_fortran(const uint8_t* src, uint8_t* dst, const Shape& shape) {
  // Fixed arrays: the rank is at most kMaxRank (parse_shape), and a corrupt file cannot make
  // this allocate.
  const size_t rank = shape.size();
  std::array<int64_t, kMaxRank> stride{};  // in elements, of the column-major source
  int64_t total = 1;
  for (size_t k = 0; k < rank; ++k) {
    stride[k] = total;
    total *= shape[k];
  }
  const int64_t inner = shape[rank - 1], inner_stride = stride[rank - 1];
  std::array<int64_t, kMaxRank> index{};
  int64_t from = 0;  // source element of `index`
  for (int64_t row = 0; row < total; row += inner) {
    for (int64_t j = 0; j < inner; ++j)
      std::memcpy(dst + (row + j) * N, src + (from + j * inner_stride) * N, N);
    for (size_t k = rank - 1; k-- > 0;) {
      from += stride[k];
      if (++index[k] < shape[k]) break;
      from -= stride[k] * shape[k];
      index[k] = 0;
    }
  }
}

// Turns the stored elements (file order and byte order) into the C-order, native tensor.
Tensor finish(Tensor stored, const NpyHeader& h, uint64_t data_start, const Reporter& err,
              const Loc& loc) {
  if (h.nbytes == 0) return stored;
  uint8_t* p = static_cast<uint8_t*>(stored.raw_data());
  const size_t n = itemsize(h.dtype);
  if (h.swap)
    for (uint64_t i = 0; i < h.nbytes; i += n) std::reverse(p + i, p + i + n);
  // Any other byte would be an invalid bool, undefined behavior in C++.
  if (h.dtype == DType::Bool)
    for (uint64_t i = 0; i < h.nbytes; ++i)
      if (p[i] > 1)
        err("the bool array has the byte {} at byte offset {}, expected 0 or 1", p[i],
            data_start + i);
  if (!h.fortran || h.shape.size() < 2) return stored;
  Tensor out = detail::empty_for("read_npy", h.shape, TensorOptions{h.dtype}, loc);
  uint8_t* dst = static_cast<uint8_t*>(out.raw_data());
  switch (n) {
    case 1:
      gather_fortran<1>(p, dst, h.shape);
      break;
    case 2:
      gather_fortran<2>(p, dst, h.shape);
      break;
    case 4:
      gather_fortran<4>(p, dst, h.shape);
      break;
    default:
      gather_fortran<8>(p, dst, h.shape);
      break;
  }
  return out;
}

// Reads exactly n bytes at `offset`; fails naming the offset when the file is shorter.
void read_at(int fd, void* out, uint64_t n, uint64_t offset, const Reporter& err) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      err("read error at byte offset {}: {}", offset, std::strerror(errno));
    }
    if (got == 0)
      err("truncated: the file ended at byte offset {} while {} more bytes were expected (did it "
          "change while being read?)",
          offset, n);
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// The preamble and padded header write_npy writes for t, after checking that it can be written.
std::string build_header(const Tensor& t, const Reporter& err, const Loc& loc) {
  if (!t.defined()) err("expected a defined tensor, but got an undefined one");
  if (t.is_meta()) err("expected a tensor with memory, but got {}", t.describe());
  if (t.dtype() == DType::BFloat16)
    err("NumPy has no bfloat16 dtype, got {}: convert it explicitly first (x.to(DType::Float32))",
        t.describe());
  const std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                       npy_descr(t.dtype(), loc), tuple_str(t.shape()));
  // Spaces and the final '\n' pad magic + version + length field + header to a multiple of 64.
  auto padded = [&](size_t preamble) {
    return dict.size() + 1 + (kAlign - (preamble + dict.size() + 1) % kAlign) % kAlign;
  };
  const bool v2 = padded(10) > 0xffff;  // the u16 length of version 1.0 cannot say it
  const size_t preamble = v2 ? 12 : 10, length = padded(preamble);
  std::string out(kMagic);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  for (size_t i = 0; i < preamble - 8; ++i) out += static_cast<char>((length >> (8 * i)) & 0xff);
  out += dict;
  out.append(length - dict.size() - 1, ' ');
  out += '\n';
  return out;
}

// Calls write(ptr, n) with t's elements in C order.
template <class Write>
void write_data(const Tensor& t, Write&& write) {
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  const Tensor c = contiguous(t);
  write(c.raw_data(), c.nbytes());
}

}  // namespace

std::string npy_descr(DType dt, const Loc& loc) {
  for (const DescrCode& d : kDescrCodes)
    if (d.dtype == dt) return (itemsize(dt) == 1 ? "|" : "<") + std::string(d.code);
  fail("npy_descr", loc, "NumPy has no dtype for kiln's {}", dtype_name(dt));
}

Tensor read_npy_bytes(std::span<const uint8_t> bytes, const std::string& name_for_errors,
                      const Loc& loc) {
  Reporter err("read_npy", name_for_errors, loc);
  const Preamble pre =
      parse_preamble(bytes.first(std::min(bytes.size(), kMaxPreambleBytes)), bytes.size(), err);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + pre.header_start,
                              pre.header_length);
  const NpyHeader h = parse_header(text, pre.header_start, err);
  const uint64_t data_start = pre.header_start + pre.header_length;
  check_data_size(h, data_start, bytes.size(), err);
  Tensor stored = storage_for(h, loc);
  if (h.nbytes > 0) std::memcpy(stored.raw_data(), bytes.data() + data_start, h.nbytes);
  return finish(std::move(stored), h, data_start, err, loc);
}

Tensor read_npy(const std::string& path, const Loc& loc) {
  Reporter err("read_npy", path, loc);
  RegularFile file = open_regular_file(path, "read_npy", loc);
  const uint64_t file_size = file.size();
  uint8_t head[kMaxPreambleBytes];
  const size_t head_size = static_cast<size_t>(std::min<uint64_t>(file_size, sizeof head));
  read_at(file.fd(), head, head_size, 0, err);
  const Preamble pre = parse_preamble({head, head_size}, file_size, err);
  // Bounded by kMaxHeaderBytes and by the file's real size (checked above).
  std::string text(pre.header_length, '\0');
  read_at(file.fd(), text.data(), pre.header_length, pre.header_start, err);
  const NpyHeader h = parse_header(text, pre.header_start, err);
  const uint64_t data_start = pre.header_start + pre.header_length;
  check_data_size(h, data_start, file_size, err);
  Tensor stored = storage_for(h, loc);
  if (h.nbytes > 0) read_at(file.fd(), stored.raw_data(), h.nbytes, data_start, err);
  return finish(std::move(stored), h, data_start, err, loc);
}

std::vector<uint8_t> serialize_npy(const Tensor& t, const Loc& loc) {
  const std::string where = "<memory>";
  const std::string header = build_header(t, Reporter("serialize_npy", where, loc), loc);
  std::vector<uint8_t> out;
  out.reserve(header.size() + t.nbytes());
  out.assign(header.begin(), header.end());
  write_data(t, [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void write_npy(const std::string& path, const Tensor& t, const Loc& loc) {
  const std::string header = build_header(t, Reporter("write_npy", path, loc), loc);
  // AtomicFile is write_file_atomic's streaming form (Note [atomic write]): the elements go to
  // the temp file straight from the tensor, without a second in-memory copy of the whole file.
  AtomicFile file(path, "write_npy", loc);
  file.write(header.data(), header.size());
  write_data(t, [&](const void* p, size_t n) { file.write(p, n); });
  file.commit();
}

}  // namespace kiln::io
