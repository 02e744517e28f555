#include "kiln/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/rng.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/regular_file.h"
#include "kiln/io/safetensors.h"

namespace kiln::train {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kFormat = "kiln.checkpoint";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kManifestFile = "checkpoint.json";
constexpr std::array<const char*, 3> kFiles = {kModelFile, kOptimizerFile, kManifestFile};
// checkpoint.json holds hyperparameters and user metadata, never tensors: a bigger file is
// corrupt or not ours, and is refused before it is read into memory.
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
constexpr size_t kMaxJsonDepth = 512;

// --- fault hook ----------------------------------------------------------------------------

std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}

CheckpointFaultHook& hook_slot() {
  static CheckpointFaultHook hook;
  return hook;
}

int injected_fault(std::string_view step, const std::string& path) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  const CheckpointFaultHook& hook = hook_slot();
  return hook ? hook(step, path) : 0;
}

// --- small helpers -------------------------------------------------------------------------

uint32_t crc32_of(std::span<const uint8_t> bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  size_t offset = 0;
  while (offset < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - offset, size_t{1} << 30);
    crc = ::crc32(crc, bytes.data() + offset, static_cast<uInt>(n));
    offset += n;
  }
  return static_cast<uint32_t>(crc);
}

std::span<const uint8_t> as_bytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// A wrapped error already carries the caller's location; keep it once.
std::string without_location(const std::string& message) {
  const size_t at = message.rfind(" — at ");
  return at == std::string::npos ? message : message.substr(0, at);
}

// "runs/ck/" and "runs/ck" name the same checkpoint; the siblings DIR.old and DIR.tmp-* need
// the name without the slash.
std::string normalize_dir(const std::string& dir, const char* op, const Loc& loc) {
  std::string out = dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out.empty() || out == "/" || out == "." || out == ".." || out.ends_with("/.") ||
      out.ends_with("/.."))
    fail(op, loc, "expected a checkpoint directory path, but got '{}'", dir);
  return out;
}

std::string parent_of(const std::string& dir) {
  std::string parent = fs::path(dir).parent_path().string();
  return parent.empty() ? "." : parent;
}

std::string old_path(const std::string& dir) {
  return dir + ".old";
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// 0 on success, else errno. Filesystems that cannot sync a directory (EINVAL) count as success.
int fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::fsync(fd) != 0 && errno != EINVAL ? errno : 0;
  ::close(fd);
  return err;
}

// A checkpoint file, or the temporary file an interrupted AtomicFile left beside one.
bool is_checkpoint_entry(const std::string& name) {
  for (const char* f : kFiles)
    if (name == f || name.starts_with(std::string(f) + ".tmp.")) return true;
  return false;
}

// The first entry of `dir` that a checkpoint directory would not hold ("" when none), so that
// no code path here ever deletes or replaces a directory with the user's own files in it.
std::string foreign_entry(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code ignored;
    if (!is_checkpoint_entry(name) || it->is_directory(ignored) || it->is_symlink(ignored))
      return name;
  }
  return ec ? std::string("(unreadable: ") + ec.message() + ")" : std::string();
}

// Deletes a checkpoint directory (complete, partial or temporary). Returns 0 or an errno;
// ENOTEMPTY, with nothing deleted, when it holds anything else.
int remove_checkpoint_dir(const std::string& dir) {
  if (!foreign_entry(dir).empty()) return ENOTEMPTY;
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().string());
  if (ec) return ec.value();
  for (const auto& name : names)
    if (::unlink(name.c_str()) != 0 && errno != ENOENT) return errno;
  return ::rmdir(dir.c_str()) != 0 ? errno : 0;
}

// Removes the temporary directory of a save unless the save got as far as renaming it.
struct TempDirGuard {
  std::string path;  // cleared once renamed
  ~TempDirGuard() {
    if (!path.empty()) remove_checkpoint_dir(path);
  }
};

// Creates DIR.tmp-XXXXXX with a fresh random suffix. Unlike mkdtemp's 0700 it gets the default
// permissions (0777 minus the umask), which the checkpoint keeps after the rename.
int make_temp_dir(const std::string& dir, std::string& out) {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device device;
  for (int attempt = 0; attempt < 100; ++attempt) {
    out = dir + ".tmp-";
    for (int i = 0; i < 6; ++i) out += kChars[device() % (sizeof(kChars) - 1)];
    int err = injected_fault("mkdir", out);
    if (err == 0 && ::mkdir(out.c_str(), 0777) != 0) err = errno;
    if (err != EEXIST) return err;
  }
  return EEXIST;
}

// Best effort: DIR.tmp-* directories that crashed saves left behind.
void remove_stale_temp_dirs(const std::string& dir) {
  const std::string prefix = fs::path(dir).filename().string() + ".tmp-";
  std::vector<std::string> stale;
  std::error_code ec;
  for (fs::directory_iterator it(parent_of(dir), ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    if (it->path().filename().string().starts_with(prefix) && it->is_directory(ignored) &&
        !it->is_symlink(ignored))
      stale.push_back(it->path().string());
  }
  for (const auto& path : stale) remove_checkpoint_dir(path);
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes, const char* op,
                               const Loc& loc) {
  return io::read_regular_file(path, op, loc, max_bytes);
}

// The deepest nesting of arrays and objects in JSON text. nlohmann's parser is iterative but
// dump() and comparisons recurse, so a corrupt file of a million '[' must be refused up front.
size_t json_depth(std::span<const uint8_t> text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (uint8_t c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// --- the manifest (checkpoint.json) --------------------------------------------------------

struct FileRecord {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct Manifest {
  std::string dir;  // the directory read: DIR, or DIR.old after an interrupted save
  std::string path;
  CheckpointState state;
  Json optimizer;
  Json scheduler;
  Generator::State rng{};
  FileRecord model_file;
  FileRecord optimizer_file;
};

class ManifestReader {
 public:
  ManifestReader(const std::string& path, const char* op, const Loc& loc)
      : path_(path), op_(op), loc_(loc) {}

  template <class... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail(op_, loc_, "'{}': {}", path_, fmt::format(f, std::forward<Args>(args)...));
  }

  const Json& field(const Json& object, const char* key, const char* where) const {
    if (!object.is_object() || !object.contains(key))
      error("expected {} to have the field \"{}\", but it has none", where, key);
    return object[key];
  }
  uint64_t unsigned_field(const Json& object, const char* key, const char* where,
                          uint64_t max = UINT64_MAX) const {
    const Json& v = field(object, key, where);
    if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
      error("expected \"{}\" of {} to be an integer in [0, {}], but got {}", key, where, max,
            v.dump());
    return v.get<uint64_t>();
  }
  FileRecord file_record(const Json& files, const char* name) const {
    const Json& r = field(files, name, "\"files\"");
    return FileRecord{name, unsigned_field(r, "bytes", name),
                      static_cast<uint32_t>(unsigned_field(r, "crc32", name, UINT32_MAX))};
  }

 private:
  const std::string& path_;
  const char* op_;
  const Loc& loc_;
};

// DIR when it exists (it is complete, see Note [checkpoint atomicity]); otherwise DIR.old,
// which a save interrupted between its two renames leaves as the newest complete checkpoint.
std::string resolve_dir(const std::string& dir, const char* op, const Loc& loc) {
  if (exists(dir)) {
    std::error_code ec;  // unlike save, loading follows a symlink ("latest" -> "epoch_5")
    if (!fs::is_directory(dir, ec))
      fail(op, loc, "expected '{}' to be a checkpoint directory", dir);
    return dir;
  }
  const std::string old = old_path(dir);
  if (is_directory(old) && exists(old + "/" + kManifestFile)) return old;
  fail(op, loc, "no checkpoint at '{}': the directory does not exist", dir);
}

Manifest read_manifest(const std::string& dir_in, const char* op, const Loc& loc) {
  Manifest m;
  m.dir = resolve_dir(normalize_dir(dir_in, op, loc), op, loc);
  m.path = m.dir + "/" + kManifestFile;
  const ManifestReader r(m.path, op, loc);
  const std::vector<uint8_t> bytes = read_file(m.path, kMaxManifestBytes, op, loc);
  if (size_t depth = json_depth(bytes); depth > kMaxJsonDepth)
    r.error("nested {} levels deep, more than the {} levels allowed", depth, kMaxJsonDepth);
  Json j;
  try {
    j = Json::parse(bytes.begin(), bytes.end());
  } catch (const Json::parse_error& e) {
    r.error("not valid JSON at byte offset {} ({})", e.byte, e.what());
  }
  if (!j.is_object()) r.error("expected a JSON object, but got {}", j.type_name());
  if (!j.contains("format") || j["format"] != kFormat)
    r.error("expected \"format\": \"{}\", but got {} (not a kiln checkpoint)", kFormat,
            j.contains("format") ? j["format"].dump() : "none");
  const Json& version = r.field(j, "version", "the checkpoint");
  if (!version.is_number_integer() || version.get<int64_t>() != kCheckpointFormatVersion)
    r.error("expected format version {}, but got {} (written by another version of kiln)",
            kCheckpointFormatVersion, version.dump());

  // The checksum covers the compact dump of everything else, so any edit or bit flip of a value
  // is caught even where the JSON still parses.
  const uint32_t recorded =
      static_cast<uint32_t>(r.unsigned_field(j, "crc32", "the checkpoint", UINT32_MAX));
  j.erase("crc32");
  const uint32_t actual = crc32_of(as_bytes(j.dump()));
  if (actual != recorded)
    r.error("the content's CRC-32 is 0x{:08x}, but the file records 0x{:08x} (corrupt or edited)",
            actual, recorded);

  const auto max_int = static_cast<uint64_t>(INT64_MAX);
  m.state.epoch = static_cast<int64_t>(r.unsigned_field(j, "epoch", "the checkpoint", max_int));
  m.state.step = static_cast<int64_t>(r.unsigned_field(j, "step", "the checkpoint", max_int));
  m.state.metadata = r.field(j, "metadata", "the checkpoint");
  m.optimizer = r.field(j, "optimizer", "the checkpoint");
  if (!m.optimizer.is_object()) r.error("expected \"optimizer\" to be an object");
  m.scheduler = r.field(j, "scheduler", "the checkpoint");
  if (!m.scheduler.is_null() && !m.scheduler.is_object())
    r.error("expected \"scheduler\" to be an object or null, but got {}", m.scheduler.dump());
  const Json& rng = r.field(j, "rng", "the checkpoint");
  m.rng.seed = r.unsigned_field(rng, "seed", "\"rng\"");
  m.rng.offset = r.unsigned_field(rng, "offset", "\"rng\"");
  const Json& files = r.field(j, "files", "the checkpoint");
  m.model_file = r.file_record(files, kModelFile);
  m.optimizer_file = r.file_record(files, kOptimizerFile);
  return m;
}

// Reads one tensor file of the set, checking it is the very file the manifest describes before
// the safetensors reader validates its structure.
io::SafetensorsFile read_tensor_file(const Manifest& m, const FileRecord& rec, const char* op,
                                     const Loc& loc) {
  const std::string path = m.dir + "/" + rec.name;
  const std::vector<uint8_t> bytes = read_file(path, UINT64_MAX, op, loc);
  if (bytes.size() != rec.bytes)
    fail(op, loc, "'{}' is {} bytes, but {} records {} (truncated, or from another checkpoint)",
         path, bytes.size(), kManifestFile, rec.bytes);
  const uint32_t crc = crc32_of(bytes);
  if (crc != rec.crc32)
    fail(op, loc,
         "'{}' has CRC-32 0x{:08x}, but {} records 0x{:08x} (corrupt, or from another "
         "checkpoint)",
         path, crc, kManifestFile, rec.crc32);
  return io::parse_safetensors(bytes, path, loc);
}

// True when load_state_dict(entries, strict) would accept `entries` (the same test it makes),
// so that it can be called last, after everything that might still fail.
bool fits_model(const nn::Module& model, const nn::StateDict& entries) {
  const nn::StateDict own = model.state_dict();
  if (own.size() != entries.size()) return false;
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : entries) given.emplace(name, &t);
  for (const auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end() || !it->second->defined() || it->second->shape() != t.shape() ||
        it->second->dtype() != t.dtype())
      return false;
  }
  return given.size() == own.size();
}

// Throws load_state_dict's own strict error (naming every missing, unexpected or mismatched key)
// prefixed with the file, when the weights do not fit; otherwise changes nothing.
void check_fits_model(nn::Module& model, const nn::StateDict& entries, const std::string& path,
                      const char* op, const Loc& loc) {
  if (fits_model(model, entries)) return;
  try {
    model.load_state_dict(entries, true, loc);
  } catch (const Error& e) {
    fail(op, loc, "'{}' does not fit the model: {}", path, without_location(e.what()));
  }
  KILN_INTERNAL_ASSERT(false, "load_state_dict accepted weights that fits_model rejected");
}

nn::StateDict model_entries(io::SafetensorsFile file) {
  return nn::StateDict(std::make_move_iterator(file.tensors.begin()),
                       std::make_move_iterator(file.tensors.end()));
}

}  // namespace

void set_checkpoint_fault_hook(CheckpointFaultHook hook) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook_slot() = std::move(hook);
}

void save_checkpoint(const std::string& dir_in, const nn::Module& model,
                     const optim::Optimizer& optimizer, const optim::LRScheduler* scheduler,
                     const CheckpointState& state, const Loc& loc) {
  const char* op = "save_checkpoint";
  const std::string dir = normalize_dir(dir_in, op, loc);
  if (state.epoch < 0 || state.step < 0)
    fail(op, loc, "expected epoch >= 0 and step >= 0, but got epoch {} and step {}", state.epoch,
         state.step);

  // Everything is serialized before the first file is touched: a failure here costs nothing.
  const std::vector<uint8_t> model_bytes = io::serialize_safetensors(model.state_dict(), {}, loc);
  const optim::OptimizerState opt = optimizer.state_dict();
  const std::vector<uint8_t> opt_bytes = io::serialize_safetensors(
      std::vector<std::pair<std::string, Tensor>>(opt.tensors.begin(), opt.tensors.end()), {}, loc);
  const Generator::State rng = default_generator().get_state();
  Json j = {{"format", kFormat},
            {"version", kCheckpointFormatVersion},
            {"epoch", state.epoch},
            {"step", state.step},
            {"optimizer", opt.meta},
            {"scheduler", scheduler ? scheduler->state_dict() : Json(nullptr)},
            {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
            {"metadata", state.metadata},
            {"files",
             {{kModelFile, {{"bytes", model_bytes.size()}, {"crc32", crc32_of(model_bytes)}}},
              {kOptimizerFile, {{"bytes", opt_bytes.size()}, {"crc32", crc32_of(opt_bytes)}}}}}};
  std::string text;
  try {
    j["crc32"] = crc32_of(as_bytes(j.dump()));
    text = j.dump(2) + "\n";
  } catch (const Json::exception& e) {
    fail(op, loc, "cannot encode the checkpoint's JSON for '{}' (is the metadata valid UTF-8?): {}",
         dir, e.what());
  }

  const std::string parent = parent_of(dir);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail(op, loc, "cannot create the directory '{}' for '{}': {}", parent, dir, ec.message());
  if (exists(dir)) {
    if (!is_directory(dir))
      fail(op, loc, "expected '{}' to be a checkpoint directory, but it is another kind of file",
           dir);
    const std::string foreign = foreign_entry(dir);
    if (!foreign.empty())
      fail(op, loc,
           "refusing to replace '{}': it holds '{}', which is not part of a checkpoint (choose "
           "an empty or new directory)",
           dir, foreign);
  }
  remove_stale_temp_dirs(dir);

  std::string tmp;
  int err = make_temp_dir(dir, tmp);
  if (err != 0)
    fail(op, loc, "cannot create a temporary directory beside '{}': {}", dir, std::strerror(err));
  TempDirGuard guard{tmp};
  // write_file_atomic fsyncs each file and the temporary directory.
  io::write_file_atomic(tmp + "/" + kModelFile, model_bytes, op, loc);
  io::write_file_atomic(tmp + "/" + kOptimizerFile, opt_bytes, op, loc);
  io::write_file_atomic(tmp + "/" + kManifestFile, as_bytes(text), op, loc);

  const std::string old = old_path(dir);
  const bool replacing = exists(dir);
  auto sync_parent = [&] {
    if (int e = fsync_dir(parent); e != 0)
      fail(op, loc, "cannot flush the directory '{}' to disk while saving '{}': {}", parent, dir,
           std::strerror(e));
  };
  if (replacing) {
    // DIR is complete, so a leftover DIR.old (a save that died before its last step) is stale.
    if (exists(old)) {
      err = injected_fault("remove_old", old);
      if (err == 0) err = remove_checkpoint_dir(old);
      if (err != 0)
        fail(op, loc, "cannot remove the leftover '{}': {} (the checkpoint '{}' is unchanged)", old,
             std::strerror(err), dir);
    }
    err = injected_fault("rename_old", dir);
    if (err == 0 && ::rename(dir.c_str(), old.c_str()) != 0) err = errno;
    if (err != 0)
      fail(op, loc, "cannot rename '{}' to '{}': {} (the checkpoint is unchanged)", dir, old,
           std::strerror(err));
    sync_parent();
  }
  err = injected_fault("rename_new", dir);
  if (err == 0 && ::rename(tmp.c_str(), dir.c_str()) != 0) err = errno;
  if (err != 0) {
    // Put the previous checkpoint back; should that fail too, readers still find it at DIR.old.
    if (replacing) ::rename(old.c_str(), dir.c_str());
    fail(op, loc, "cannot rename '{}' to '{}': {} (the previous checkpoint is kept)", tmp, dir,
         std::strerror(err));
  }
  guard.path.clear();
  sync_parent();
  // The new checkpoint is complete and durable now. A DIR.old that cannot be removed is only
  // clutter, which the next save removes, so it does not fail this one.
  if (exists(old) && injected_fault("remove_old", old) == 0 && remove_checkpoint_dir(old) == 0)
    fsync_dir(parent);
}

CheckpointState load_checkpoint(const std::string& dir, nn::Module& model,
                                optim::Optimizer& optimizer, optim::LRScheduler* scheduler,
                                const Loc& loc) {
  const char* op = "load_checkpoint";
  // Read and verify everything first; nothing is changed until all of it has passed.
  const Manifest m = read_manifest(dir, op, loc);
  if (scheduler != nullptr && m.scheduler.is_null())
    fail(op, loc, "'{}' holds no LR scheduler state, but a {} was given to restore", m.path,
         scheduler->name());
  const std::string model_path = m.dir + "/" + kModelFile;
  const std::string opt_path = m.dir + "/" + kOptimizerFile;
  const nn::StateDict weights = model_entries(read_tensor_file(m, m.model_file, op, loc));
  io::SafetensorsFile opt_file = read_tensor_file(m, m.optimizer_file, op, loc);
  check_fits_model(model, weights, model_path, op, loc);
  optim::OptimizerState opt{m.optimizer, {}};
  for (auto& [name, t] : opt_file.tensors) opt.tensors.emplace(name, std::move(t));

  // The scheduler's loader can fail after changing some fields, so it goes first and is rolled
  // back from a snapshot; the optimizer's validates everything before changing anything; the
  // model's cannot fail any more (checked above).
  Json scheduler_before;
  auto restore_scheduler = [&]() noexcept {
    if (scheduler_before.is_null()) return;
    try {
      scheduler->load_state_dict(scheduler_before, loc);
    } catch (...) {
    }
  };
  if (scheduler != nullptr) {
    scheduler_before = scheduler->state_dict();
    try {
      scheduler->load_state_dict(m.scheduler, loc);
    } catch (const Error& e) {
      restore_scheduler();
      fail(op, loc, "the scheduler state in '{}' does not fit the {}: {}", m.path,
           scheduler->name(), without_location(e.what()));
    }
  }
  try {
    optimizer.load_state_dict(opt, loc);
  } catch (const Error& e) {
    restore_scheduler();
    fail(op, loc, "'{}' (with the optimizer section of {}) does not fit the optimizer: {}",
         opt_path, kManifestFile, without_location(e.what()));
  }
  model.load_state_dict(weights, true, loc);
  default_generator().set_state(m.rng);
  return m.state;
}

CheckpointState read_checkpoint_state(const std::string& dir, const Loc& loc) {
  return read_manifest(dir, "read_checkpoint_state", loc).state;
}

nlohmann::json read_checkpoint_metadata(const std::string& dir, const Loc& loc) {
  return read_manifest(dir, "read_checkpoint_metadata", loc).state.metadata;
}

bool checkpoint_exists(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) return false;
  const std::string manifest = std::string("/") + kManifestFile;
  return exists(dir) ? exists(dir + manifest) : exists(old_path(dir) + manifest);
}

void load_checkpoint_weights(const std::string& dir, nn::Module& model, const Loc& loc) {
  const char* op = "load_checkpoint_weights";
  const Manifest m = read_manifest(dir, op, loc);
  const nn::StateDict weights = model_entries(read_tensor_file(m, m.model_file, op, loc));
  check_fits_model(model, weights, m.dir + "/" + kModelFile, op, loc);
  model.load_state_dict(weights, true, loc);
}

}  // namespace kiln::train
