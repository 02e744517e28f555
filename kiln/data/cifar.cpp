#include "kiln/data/cifar.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/regular_file.h"
#include "kiln/ops/binary.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// The number of records in `path`, after checking that the size is a whole, non-zero number of
// records.
int64_t count_records(const char* op, const std::string& path, const Loc& loc) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) fail(op, loc, "cannot open '{}': no such file", path);
  if (!fs::is_regular_file(status)) fail(op, loc, "cannot read '{}': not a regular file", path);
  auto bytes = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) fail(op, loc, "cannot read the size of '{}': {}", path, ec.message());
  if (bytes == 0) fail(op, loc, "'{}' is empty, expected {}-byte records", path, kRecord);
  if (bytes % kRecord != 0) {
    int64_t whole = bytes / kRecord;
    fail(op, loc,
         "truncated file '{}': {} bytes is not a whole number of {}-byte records; record {} at "
         "byte offset {} has only {} of its bytes",
         path, bytes, kRecord, whole, whole * kRecord, bytes % kRecord);
  }
  return bytes / kRecord;
}

// Reads `n` records of `path` into pixels [n, 3072] and labels [n], validating the labels.
void read_records(const char* op, const std::string& path, int64_t n, uint8_t* pixels,
                  int64_t* labels, const Loc& loc) {
  File file(io::open_regular_file(path, op, loc).release_to_stdio(op, path, loc));
  constexpr int64_t kChunk = 512;  // records per read
  std::vector<uint8_t> buffer(kChunk * kRecord);
  for (int64_t first = 0; first < n; first += kChunk) {
    int64_t count = std::min(kChunk, n - first);
    size_t want = static_cast<size_t>(count * kRecord);
    size_t got = std::fread(buffer.data(), 1, want, file.get());
    if (got != want)
      fail(op, loc, "truncated file '{}': reading stopped at byte offset {} ({})", path,
           first * kRecord + static_cast<int64_t>(got),
           std::ferror(file.get()) ? std::strerror(errno) : "the file shrank while reading");
    for (int64_t r = 0; r < count; ++r) {
      const uint8_t* record = buffer.data() + r * kRecord;
      int64_t index = first + r;
      if (record[0] > 9)
        fail(op, loc, "corrupt file '{}': record {} at byte offset {} has label {}, expected 0..9",
             path, index, index * kRecord, record[0]);
      labels[index] = record[0];
      std::memcpy(pixels + index * kPixels, record + 1, kPixels);
    }
  }
}

Cifar10Batch read_files(const char* op, const std::vector<std::string>& paths, const Loc& loc) {
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const auto& path : paths) total += counts.emplace_back(count_records(op, path, loc));
  Cifar10Batch out{empty(Shape{total, 3, 32, 32}, {DType::UInt8}),
                   empty(Shape{total}, {DType::Int64})};
  int64_t at = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    read_records(op, paths[i], counts[i], out.images.data<uint8_t>() + at * kPixels,
                 out.labels.data<int64_t>() + at, loc);
    at += counts[i];
  }
  return out;
}

}  // namespace

Cifar10Batch read_cifar10_batch(const std::string& path, const Loc& loc) {
  return read_files("read_cifar10_batch", {path}, loc);
}

std::shared_ptr<TensorDataset> cifar10(const std::string& dir, const std::string& split,
                                       DType dtype, const Loc& loc) {
  if (split != "train" && split != "test")
    fail("cifar10", loc, "expected split \"train\" or \"test\", but got \"{}\"", split);
  if (dtype != DType::Float32 && dtype != DType::UInt8)
    fail("cifar10", loc, "expected dtype float32 or uint8, but got {}", dtype_name(dtype));
  // Accept the folder the archive unpacks into as well as its parent.
  fs::path root = dir;
  if (!fs::exists(root / "test_batch.bin") && fs::exists(root / "cifar-10-batches-bin"))
    root /= "cifar-10-batches-bin";
  std::vector<std::string> paths;
  if (split == "train") {
    for (int k = 1; k <= 5; ++k)
      paths.push_back((root / ("data_batch_" + std::to_string(k) + ".bin")).string());
  } else {
    paths.push_back((root / "test_batch.bin").string());
  }
  Cifar10Batch batch = read_files("cifar10", paths, loc);
  Tensor images =
      dtype == DType::UInt8 ? batch.images : div(batch.images.to(DType::Float32), 255.0);
  return std::make_shared<TensorDataset>(images, batch.labels, loc);
}

}  // namespace kiln::data
