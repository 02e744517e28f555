// Pipeline::cache(filename): the file-backed cache stage and its file format (Note [file cache]
// in pipeline.h).
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/data/pipeline.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/crc32.h"
#include "kiln/io/regular_file.h"

namespace kiln::data {
namespace {

static_assert(std::endian::native == std::endian::little, "the cache format is little-endian");

constexpr char kOp[] = "Pipeline.cache";
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'C', 'H', '1'};
constexpr char kEndMagic[8] = {'K', 'I', 'L', 'N', 'C', 'E', 'N', 'D'};
constexpr uint64_t kFooterBytes = 1 + 8 + 8;
constexpr int kMaxRank = 16;
constexpr size_t kFlushBytes = size_t{1} << 20;

// Streams elements into the temp file of an AtomicFile; finish() renames it into place.
class CacheWriter {
 public:
  CacheWriter(const std::string& path, const Loc& loc) : file_(path, kOp, loc), loc_(loc) {
    put(kMagic, sizeof kMagic);
  }

  void add(const Example& e) {
    NoGradGuard no_grad;
    size_t start = buffer_.size();
    uint8_t flags = (e.data.defined() ? 1 : 0) | (e.target.defined() ? 2 : 0);
    put_value(uint8_t{1});
    put_value(flags);
    if (e.data.defined()) put_tensor(e.data, "data");
    if (e.target.defined()) put_tensor(e.target, "target");
    put_value(io::crc32_update(0, buffer_.data() + start, buffer_.size() - start));
    ++count_;
    if (buffer_.size() >= kFlushBytes) flush();
  }

  void finish() {
    put_value(uint8_t{0});
    put_value(count_);
    put(kEndMagic, sizeof kEndMagic);
    flush();
    file_.commit();
  }

 private:
  void put(const void* data, size_t n) {
    auto p = static_cast<const uint8_t*>(data);
    buffer_.insert(buffer_.end(), p, p + n);
  }
  template <class T>
  void put_value(T v) {
    put(&v, sizeof v);
  }
  void put_tensor(const Tensor& t, const char* what) {
    if (t.is_meta() || t.dim() > kMaxRank)
      fail(kOp, loc_, "expected {} tensors with memory and rank <= {}, but element {} has {}", what,
           kMaxRank, count_, t.describe());
    Tensor c = t.contiguous();
    put_value(static_cast<uint8_t>(c.dtype()));
    put_value(static_cast<uint8_t>(c.dim()));
    for (int64_t d : c.shape()) put_value(d);
    put(c.raw_data(), c.nbytes());
  }
  void flush() {
    file_.write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  io::AtomicFile file_;
  Loc loc_;
  std::vector<uint8_t> buffer_;
  uint64_t count_ = 0;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Reads a cache file back, validating every byte count before it allocates.
class CacheReader {
 public:
  CacheReader(const std::string& path, const Loc& loc) : path_(path), loc_(loc) {
    io::RegularFile file = io::open_regular_file(path, kOp, loc);
    const uint64_t size = file.size();
    file_.reset(file.release_to_stdio(kOp, path, loc));
    if (size < sizeof kMagic + kFooterBytes)
      fail(kOp, loc, "corrupt cache file '{}': {} bytes is too short (truncated?)", path, size);
    end_ = size - kFooterBytes;
    char magic[8];
    read_at(0, magic, sizeof magic);
    if (std::memcmp(magic, kMagic, sizeof magic) != 0)
      fail(kOp, loc, "'{}' is not a kiln pipeline cache file: bad magic at byte offset 0", path);
    uint8_t footer[kFooterBytes];
    read_at(end_, footer, sizeof footer);
    if (footer[0] != 0 || std::memcmp(footer + 9, kEndMagic, sizeof kEndMagic) != 0)
      fail(kOp, loc, "corrupt cache file '{}': no end marker at byte offset {} (truncated?)", path,
           end_);
    std::memcpy(&expected_, footer + 1, sizeof expected_);
    if (std::fseek(file_.get(), sizeof kMagic, SEEK_SET) != 0) io_error(sizeof kMagic);
    pos_ = sizeof kMagic;
  }

  std::optional<Example> next() {
    if (pos_ == end_) {
      if (count_ != expected_)
        corrupt(pos_, fmt::format("the end marker counts {} elements, but the file holds {}",
                                  expected_, count_));
      return std::nullopt;
    }
    uint64_t start = pos_;
    crc_ = 0;
    uint8_t tag = read_value<uint8_t>("an element tag");
    uint8_t flags = read_value<uint8_t>("element flags");
    if (tag != 1 || flags > 3)
      corrupt(start, fmt::format("expected element {} (tag 1, flags <= 3), but got tag {} and "
                                 "flags {}",
                                 count_, tag, flags));
    Example e;
    if (flags & 1) e.data = read_tensor();
    if (flags & 2) e.target = read_tensor();
    uint32_t computed = crc_;
    uint32_t stored = read_value<uint32_t>("a checksum");
    if (stored != computed) corrupt(start, fmt::format("checksum mismatch in element {}", count_));
    ++count_;
    return e;
  }

 private:
  [[noreturn]] void corrupt(uint64_t offset, const std::string& what) const {
    fail(kOp, loc_, "corrupt cache file '{}' at byte offset {}: {}", path_, offset, what);
  }
  [[noreturn]] void io_error(uint64_t offset) const {
    fail(kOp, loc_, "cannot read cache file '{}' at byte offset {}: {}", path_, offset,
         std::ferror(file_.get()) ? std::strerror(errno) : "the file shrank while reading");
  }
  void read_at(uint64_t offset, void* out, size_t n) {
    if (std::fseek(file_.get(), static_cast<long>(offset), SEEK_SET) != 0 ||
        std::fread(out, 1, n, file_.get()) != n)
      io_error(offset);
  }
  void read(void* out, uint64_t n, const char* what) {
    if (n > end_ - pos_)
      corrupt(pos_, fmt::format("{} needs {} bytes, but only {} remain before the end marker", what,
                                n, end_ - pos_));
    if (n > 0 && std::fread(out, 1, n, file_.get()) != n) io_error(pos_);
    crc_ = io::crc32_update(crc_, out, n);
    pos_ += n;
  }
  template <class T>
  T read_value(const char* what) {
    T v;
    read(&v, sizeof v, what);
    return v;
  }
  Tensor read_tensor() {
    uint64_t start = pos_;
    auto dtype = read_value<uint8_t>("a dtype");
    auto rank = read_value<uint8_t>("a rank");
    if (dtype > static_cast<uint8_t>(DType::Float64) || rank > kMaxRank)
      corrupt(start, fmt::format("expected a dtype code <= {} and a rank <= {}, but got {} and {}",
                                 static_cast<int>(DType::Float64), kMaxRank, dtype, rank));
    auto dt = static_cast<DType>(dtype);
    Shape shape(rank);
    uint64_t bytes = itemsize(dt);
    for (auto& d : shape) {
      d = read_value<int64_t>("a dimension");
      if (d < 0) corrupt(start, fmt::format("negative dimension {}", d));
      // Checked before multiplying, so a hostile header cannot overflow the count.
      if (d > 0 && bytes > (end_ - pos_) / static_cast<uint64_t>(d))
        corrupt(start, fmt::format("a {} tensor of shape [{}] does not fit in the {} bytes left",
                                   dtype_name(dt), fmt::join(shape, ", "), end_ - pos_));
      bytes *= static_cast<uint64_t>(d);
    }
    Tensor t = empty(shape, {dt});
    read(t.raw_data(), bytes, "tensor data");
    if (dt == DType::Bool) {
      const auto* b = static_cast<const uint8_t*>(t.raw_data());
      for (uint64_t i = 0; i < bytes; ++i)
        if (b[i] > 1) corrupt(pos_ - bytes + i, "a bool byte that is neither 0 nor 1");
    }
    return t;
  }

  std::string path_;
  Loc loc_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  uint64_t end_ = 0;  // where the footer starts
  uint64_t pos_ = 0;
  uint64_t expected_ = 0;
  uint64_t count_ = 0;
  uint32_t crc_ = 0;
};

// The cache files that passes of this process are writing now: one writer per file, so that two
// passes (of one pipeline or of two with the same filename) never share a temp file.
class WriterSlot {
 public:
  // The slot for `path`, or null when another pass holds it.
  static std::unique_ptr<WriterSlot> acquire(const std::string& path) {
    std::string key = std::filesystem::absolute(path).lexically_normal().string();
    std::lock_guard<std::mutex> lock(mutex());
    if (!busy().insert(key).second) return nullptr;
    return std::unique_ptr<WriterSlot>(new WriterSlot(std::move(key)));
  }
  ~WriterSlot() {
    std::lock_guard<std::mutex> lock(mutex());
    busy().erase(key_);
  }
  WriterSlot(const WriterSlot&) = delete;
  WriterSlot& operator=(const WriterSlot&) = delete;

 private:
  explicit WriterSlot(std::string key) : key_(std::move(key)) {}
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::set<std::string>& busy() {
    static std::set<std::string> s;
    return s;
  }
  std::string key_;
};

class CacheReadStream final : public Stream {
 public:
  CacheReadStream(const std::string& path, const Loc& loc) : reader_(path, loc) {}
  std::optional<Example> next() override { return reader_.next(); }

 private:
  CacheReader reader_;
};

class CacheWriteStream final : public Stream {
 public:
  CacheWriteStream(std::unique_ptr<WriterSlot> slot, std::unique_ptr<Stream> up,
                   const std::string& path, const Loc& loc)
      : slot_(std::move(slot)), up_(std::move(up)), writer_(path, loc) {}
  std::optional<Example> next() override {
    if (done_) return std::nullopt;
    auto e = up_->next();
    if (e) {
      writer_.add(*e);
      return e;
    }
    done_ = true;
    writer_.finish();
    slot_.reset();
    return std::nullopt;
  }

 private:
  std::unique_ptr<WriterSlot> slot_;  // first: released after the temp file is gone
  std::unique_ptr<Stream> up_;
  CacheWriter writer_;
  bool done_ = false;
};

}  // namespace

Pipeline Pipeline::cache(const std::string& filename, const Loc& loc) const {
  if (filename.empty()) return cache();
  return Pipeline([f = factory_, filename, loc]() -> std::unique_ptr<Stream> {
    std::error_code ec;
    if (std::filesystem::exists(filename, ec))
      return std::make_unique<CacheReadStream>(filename, loc);
    auto slot = WriterSlot::acquire(filename);
    if (!slot) return f();  // another pass is writing the file
    return std::make_unique<CacheWriteStream>(std::move(slot), f(), filename, loc);
  });
}

}  // namespace kiln::data
