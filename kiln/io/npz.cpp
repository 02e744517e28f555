#include "kiln/io/npz.h"

#include <zip.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string_view>

#include "kiln/io/atomic_file.h"
#include "kiln/io/file_error.h"
#include "kiln/io/npy.h"
#include "kiln/io/regular_file.h"

namespace kiln::io {

namespace {

using Reporter = FileErrorReporter;

constexpr std::string_view kSuffix = ".npy";
// An entry is read in pieces of this size, so that memory follows the bytes the entry really
// yields rather than the size its header claims.
constexpr uint64_t kChunk = uint64_t{1} << 20;
// The zip epoch, 1980-01-01 00:00:00, in MS-DOS date and time fields.
constexpr zip_uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;
constexpr zip_uint16_t kDosTime = 0;

struct ArchiveCloser {
  void operator()(zip_t* za) const { zip_discard(za); }
};
using Archive = std::unique_ptr<zip_t, ArchiveCloser>;

struct EntryCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};
using Entry = std::unique_ptr<zip_file_t, EntryCloser>;

std::string libzip_error(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string out = zip_error_strerror(&e);
  zip_error_fini(&e);
  return out;
}

// What an archive that libzip refuses to open is, in the user's terms.
std::string open_failure(int code) {
  switch (code) {
    case ZIP_ER_NOZIP:
      return "not a zip archive (no end of central directory record; a .npz is what numpy.savez "
             "writes)";
    case ZIP_ER_EXISTS:
      return "the archive holds two entries of the same name (an array appears twice)";
    case ZIP_ER_INCONS:
      return "the zip archive is inconsistent (truncated, or its central directory disagrees with "
             "its entries): " +
             libzip_error(code);
    default:
      return "cannot open it as a zip archive: " + libzip_error(code);
  }
}

std::vector<uint8_t> read_entry(zip_t* za, zip_uint64_t index, const zip_stat_t& st,
                                const std::string& name, const Reporter& err) {
  Entry f(zip_fopen_index(za, index, 0));
  if (!f) err("entry '{}': cannot open it: {}", name, zip_error_strerror(zip_get_error(za)));
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<size_t>(std::min(st.size, kChunk)));
  for (;;) {
    const size_t at = bytes.size();
    bytes.resize(at + kChunk);
    const zip_int64_t n = zip_fread(f.get(), bytes.data() + at, kChunk);
    if (n < 0)
      err("entry '{}': its data is corrupt after {} bytes: {}", name, at,
          zip_error_strerror(zip_file_get_error(f.get())));
    bytes.resize(at + static_cast<size_t>(n));
    if (bytes.size() > st.size)
      err("entry '{}': it yields more than the {} bytes its header declares", name, st.size);
    if (n == 0) break;
  }
  if (bytes.size() != st.size)
    err("entry '{}': it yields {} bytes, but its header declares {}", name, bytes.size(), st.size);
  return bytes;
}

// The end of central directory record, which even an archive without entries has.
constexpr uint64_t kSmallestArchive = 22;

void check_size(uint64_t size, const Reporter& err) {
  if (size < kSmallestArchive)
    err("not a zip archive: it is {} bytes, and the smallest one (no entries) is {}", size,
        kSmallestArchive);
}

// A name for messages: a NUL byte would end the text early.
std::string printable(const std::string& name) {
  std::string out;
  for (char c : name) out += c == '\0' ? std::string("\\0") : std::string(1, c);
  return out;
}

NamedArrays read_archive(zip_t* za, const std::string& file, const Loc& loc) {
  const Reporter err("read_npz", file, loc);
  const zip_int64_t count = zip_get_num_entries(za, 0);
  if (count < 0) err("cannot count its entries: {}", zip_error_strerror(zip_get_error(za)));
  NamedArrays out;
  std::set<std::string> seen;
  for (zip_uint64_t i = 0; i < static_cast<zip_uint64_t>(count); ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za, i, 0, &st) != 0)
      err("entry {}: cannot read its header: {}", i, zip_error_strerror(zip_get_error(za)));
    const std::string name = (st.valid & ZIP_STAT_NAME) ? st.name : "";
    if (!(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_COMP_METHOD))
      err("entry '{}': its header lacks the size or the compression method", name);
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix))
      err("entry '{}' is not an array: numpy.savez stores each array NAME as 'NAME.npy'", name);
    if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
      err("entry '{}' is encrypted; kiln reads unencrypted archives only", name);
    if (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE)
      err("entry '{}' uses zip compression method {}; kiln reads stored (numpy.savez) and "
          "deflated (numpy.savez_compressed) entries",
          name, st.comp_method);
    const std::string key = name.substr(0, name.size() - kSuffix.size());
    if (!seen.insert(key).second) err("entry '{}' appears twice", name);
    const std::vector<uint8_t> bytes = read_entry(za, i, st, name, err);
    out.emplace_back(key, read_npy_bytes(bytes, file + ":" + name, loc));
  }
  return out;
}

void check_name(const std::string& name, const Reporter& err) {
  if (name.empty()) err("an array name is empty");
  if (name.find('\0') != std::string::npos)
    err("the array name '{}' holds a NUL byte", printable(name));
  if (name.front() == '/') err("the array name '{}' is absolute; names must be relative", name);
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(name.find('/', start), name.size());
    if (name.compare(start, end - start, "..") == 0 && end - start == 2)
      err("the array name '{}' has a '..' component", name);
    if (end == name.size()) break;
    start = end + 1;
  }
}

}  // namespace

NamedArrays read_npz(const std::string& path, const Loc& loc) {
  const Reporter err("read_npz", path, loc);
  RegularFile file = open_regular_file(path, "read_npz", loc);
  check_size(file.size(), err);
  int code = 0;
  // On success libzip owns the descriptor (zip_discard closes it); on failure it stays ours.
  Archive za(zip_fdopen(file.fd(), ZIP_CHECKCONS, &code));
  if (!za) err("{}", open_failure(code));
  file.release();
  return read_archive(za.get(), path, loc);
}

NamedArrays read_npz_bytes(std::span<const uint8_t> bytes, const std::string& name_for_errors,
                           const Loc& loc) {
  const Reporter err("read_npz", name_for_errors, loc);
  check_size(bytes.size(), err);
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &ze);
  Archive za(src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze) : nullptr);
  if (!za) {
    const int code = zip_error_code_zip(&ze);
    zip_error_fini(&ze);
    if (src) zip_source_free(src);  // still ours when the open failed
    err("{}", open_failure(code));
  }
  zip_error_fini(&ze);
  return read_archive(za.get(), name_for_errors, loc);
}

std::vector<uint8_t> serialize_npz(const NamedArrays& arrays, NpzCompression compression,
                                   const Loc& loc) {
  const std::string where = "<memory>";
  const Reporter err("write_npz", where, loc);
  std::set<std::string> seen;
  // The .npy bytes of every array; libzip reads them when the archive is closed.
  std::vector<std::vector<uint8_t>> members;
  members.reserve(arrays.size());
  for (const auto& [name, t] : arrays) {
    check_name(name, err);
    if (!seen.insert(name).second) err("the array name '{}' is given twice", printable(name));
    members.push_back(serialize_npy(t, loc));
  }
  // numpy.savez() with no arrays writes an archive that is only its end record; libzip writes
  // nothing for an archive without entries (it removes the file), so that one is spelled here.
  if (arrays.empty()) {
    std::vector<uint8_t> end_record(22, 0);
    const char signature[] = {'P', 'K', 5, 6};
    std::copy(signature, signature + 4, end_record.begin());
    return end_record;
  }

  zip_error_t ze;
  zip_error_init(&ze);
  const auto libzip_failed = [&](std::string_view what) {
    const std::string why = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    err("cannot {}: {}", what, why);
  };
  zip_source_t* out = zip_source_buffer_create(nullptr, 0, 0, &ze);
  if (!out) libzip_failed("start an archive in memory");
  Archive za(zip_open_from_source(out, ZIP_TRUNCATE, &ze));
  if (!za) {
    zip_source_free(out);
    libzip_failed("start an archive in memory");
  }
  zip_error_fini(&ze);
  // One reference for the archive (released when it is closed), one for reading its bytes after.
  zip_source_keep(out);
  const std::unique_ptr<zip_source_t, decltype(&zip_source_free)> out_guard(out, zip_source_free);
  const auto fail = [&](std::string_view what, const std::string& name) {
    err("cannot {} '{}{}': {}", what, name, kSuffix, zip_error_strerror(zip_get_error(za.get())));
  };
  for (size_t i = 0; i < arrays.size(); ++i) {
    const std::string& name = arrays[i].first;
    zip_source_t* src = zip_source_buffer(za.get(), members[i].data(), members[i].size(), 0);
    if (!src) fail("add", name);
    const zip_int64_t index =
        zip_file_add(za.get(), (name + std::string(kSuffix)).c_str(), src, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(src);
      fail("add", name);
    }
    const auto idx = static_cast<zip_uint64_t>(index);
    const zip_int32_t method =
        compression == NpzCompression::kDeflated ? ZIP_CM_DEFLATE : ZIP_CM_STORE;
    if (zip_set_file_compression(za.get(), idx, method, 0) != 0)
      fail("set the compression of", name);
    if (zip_file_set_dostime(za.get(), idx, kDosTime, kDosDate, 0) != 0)
      fail("set the time of", name);
  }
  if (zip_close(za.get()) != 0) fail("finish the archive at", arrays.back().first);
  za.release();  // zip_close freed it

  std::vector<uint8_t> bytes;
  if (zip_source_open(out) != 0)
    err("cannot read the finished archive: {}", zip_error_strerror(zip_source_error(out)));
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_source_stat(out, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    zip_source_close(out);
    err("cannot size the finished archive: {}", zip_error_strerror(zip_source_error(out)));
  }
  bytes.resize(static_cast<size_t>(st.size));
  const zip_int64_t n = zip_source_read(out, bytes.data(), bytes.size());
  zip_source_close(out);
  if (n < 0 || static_cast<uint64_t>(n) != st.size)
    err("cannot read the finished archive: {}", zip_error_strerror(zip_source_error(out)));
  return bytes;
}

void write_npz(const std::string& path, const NamedArrays& arrays, NpzCompression compression,
               const Loc& loc) {
  const std::vector<uint8_t> bytes = serialize_npz(arrays, compression, loc);
  write_file_atomic(path, bytes, "write_npz", loc);
}

}  // namespace kiln::io
