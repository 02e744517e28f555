#include "kiln/io/dir_transaction.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"

namespace kiln::io {

namespace {

namespace fs = std::filesystem;

// --- fault hook ----------------------------------------------------------------------------

int injected_fault(std::string_view step, const std::string& path) {
  return dir_transaction_faults().check(step, path);
}

// --- paths ---------------------------------------------------------------------------------

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

// --- what a directory of the layout may hold -----------------------------------------------

// A file of the layout, or the temporary file an interrupted AtomicFile left beside one.
bool is_layout_entry(const DirLayout& layout, const std::string& name) {
  for (const std::string& f : layout.files)
    if (name == f || name.starts_with(f + ".tmp.")) return true;
  return false;
}

bool is_layout_folder(const DirLayout& layout, const std::string& name) {
  return std::find(layout.folders.begin(), layout.folders.end(), name) != layout.folders.end();
}

// The first entry of `dir` that is not a plain file ("" when none).
std::string non_file_entry(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    if (it->is_symlink(ignored) || !it->is_regular_file(ignored))
      return it->path().filename().string();
  }
  return ec ? std::string("(unreadable: ") + ec.message() + ")" : std::string();
}

// The first entry of `dir` that a directory of the layout would not hold ("" when none), so
// that no code path here ever deletes or replaces a directory with the user's own files in it.
std::string foreign_entry(const DirLayout& layout, const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code ignored;
    if (it->is_symlink(ignored)) return name;
    if (it->is_directory(ignored)) {
      if (!is_layout_folder(layout, name)) return name;
      if (std::string inner = non_file_entry(it->path().string()); !inner.empty())
        return name + "/" + inner;
    } else if (!is_layout_entry(layout, name)) {
      return name;
    }
  }
  return ec ? std::string("(unreadable: ") + ec.message() + ")" : std::string();
}

// Unlinks every entry of `dir` (plain files, checked by the caller). 0 or an errno.
int unlink_entries(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().string());
  if (ec) return ec.value();
  for (const auto& name : names)
    if (::unlink(name.c_str()) != 0 && errno != ENOENT) return errno;
  return 0;
}

// Deletes a directory of the layout (complete, partial or temporary). Returns 0 or an errno;
// ENOTEMPTY, with nothing deleted, when it holds anything else.
int remove_layout_dir(const DirLayout& layout, const std::string& dir) {
  if (!foreign_entry(layout, dir).empty()) return ENOTEMPTY;
  for (const std::string& folder : layout.folders) {
    const std::string path = dir + "/" + folder;
    if (!is_directory(path)) continue;
    if (int err = unlink_entries(path); err != 0) return err;
    if (::rmdir(path.c_str()) != 0) return errno;
  }
  if (int err = unlink_entries(dir); err != 0) return err;
  return ::rmdir(dir.c_str()) != 0 ? errno : 0;
}

// Creates DIR.tmp-XXXXXX with a fresh random suffix. Unlike mkdtemp's 0700 it gets the default
// permissions (0777 minus the umask), which the directory keeps after the rename.
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

// Best effort: DIR.tmp-* directories that crashed transactions left behind.
void remove_stale_temp_dirs(const DirLayout& layout, const std::string& dir) {
  const std::string prefix = fs::path(dir).filename().string() + ".tmp-";
  std::vector<std::string> stale;
  std::error_code ec;
  for (fs::directory_iterator it(parent_of(dir), ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    if (it->path().filename().string().starts_with(prefix) && it->is_directory(ignored) &&
        !it->is_symlink(ignored))
      stale.push_back(it->path().string());
  }
  for (const auto& path : stale) remove_layout_dir(layout, path);
}

}  // namespace

FaultPoint& dir_transaction_faults() {
  static auto* point = new FaultPoint();  // never destroyed: saves may run during exit
  return *point;
}

std::string normalize_dir_path(const std::string& dir, const DirLayout& layout, std::string_view op,
                               const std::source_location& loc) {
  std::string out = dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out.empty() || out == "/" || out == "." || out == ".." || out.ends_with("/.") ||
      out.ends_with("/.."))
    fail(op, loc, "expected a {} directory path, but got '{}'", layout.kind, dir);
  return out;
}

std::string resolve_committed_dir(const std::string& dir_in, const DirLayout& layout,
                                  std::string_view op, const std::source_location& loc) {
  const std::string dir = normalize_dir_path(dir_in, layout, op, loc);
  if (exists(dir)) {
    std::error_code ec;  // unlike a transaction, reading follows a symlink
    if (!fs::is_directory(dir, ec))
      fail(op, loc, "expected '{}' to be a {} directory", dir, layout.kind);
    return dir;
  }
  const std::string old = old_path(dir);
  if (is_directory(old) && exists(old + "/" + layout.marker)) return old;
  fail(op, loc, "no {} at '{}': the directory does not exist", layout.kind, dir);
}

bool committed_dir_exists(const std::string& dir_in, const DirLayout& layout) noexcept {
  try {
    std::string dir = dir_in;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (dir.empty()) return false;
    const std::string marker = "/" + layout.marker;
    return exists(dir) ? exists(dir + marker) : exists(old_path(dir) + marker);
  } catch (...) {  // std::bad_alloc
    return false;
  }
}

DirTransaction::DirTransaction(const std::string& dir, DirLayout layout, std::string_view op,
                               const std::source_location& loc)
    : layout_(std::move(layout)), op_(op), loc_(loc) {
  KILN_INTERNAL_ASSERT(
      std::find(layout_.files.begin(), layout_.files.end(), layout_.marker) != layout_.files.end(),
      "DirLayout: the marker must be one of the layout's files");
  dir_ = normalize_dir_path(dir, layout_, op_, loc_);
  parent_ = parent_of(dir_);
  std::error_code ec;
  fs::create_directories(parent_, ec);
  if (ec)
    fail(op_, loc_, "cannot create the directory '{}' for '{}': {}", parent_, dir_, ec.message());
  if (exists(dir_)) {
    if (!is_directory(dir_))
      fail(op_, loc_, "expected '{}' to be a {} directory, but it is another kind of file", dir_,
           layout_.kind);
    const std::string foreign = foreign_entry(layout_, dir_);
    if (!foreign.empty())
      fail(op_, loc_,
           "refusing to replace '{}': it holds '{}', which is not part of a {} (choose an empty "
           "or new directory)",
           dir_, foreign, layout_.kind);
  }
  remove_stale_temp_dirs(layout_, dir_);
  if (int err = make_temp_dir(dir_, temp_dir_); err != 0) {
    temp_dir_.clear();
    fail(op_, loc_, "cannot create a temporary directory beside '{}': {}", dir_,
         std::strerror(err));
  }
}

DirTransaction::~DirTransaction() {
  remove_temp_dir();
}

void DirTransaction::remove_temp_dir() noexcept {
  if (!committed_ && !temp_dir_.empty()) remove_layout_dir(layout_, temp_dir_);
}

std::string DirTransaction::temp_path(std::string_view name) {
  if (std::find(layout_.files.begin(), layout_.files.end(), name) != layout_.files.end())
    return temp_dir_ + "/" + std::string(name);
  const size_t slash = name.find('/');
  if (slash != std::string_view::npos) {
    const std::string folder(name.substr(0, slash));
    const std::string_view file = name.substr(slash + 1);
    if (is_layout_folder(layout_, folder) && !file.empty() && file != "." && file != ".." &&
        file.find('/') == std::string_view::npos && file.find('\0') == std::string_view::npos) {
      const std::string path = temp_dir_ + "/" + folder;
      if (!is_directory(path)) {
        if (::mkdir(path.c_str(), 0777) != 0)
          fail(op_, loc_, "cannot create the folder '{}': {}", path, std::strerror(errno));
        if (int e = fsync_dir(temp_dir_); e != 0)
          fail(op_, loc_, "cannot flush the directory '{}' to disk: {}", temp_dir_,
               std::strerror(e));
      }
      return path + "/" + std::string(file);
    }
  }
  const std::string folders =
      layout_.folders.empty() ? ""
                              : fmt::format(" and files in {}/", fmt::join(layout_.folders, "/, "));
  fail(op_, loc_, "cannot write '{}' into '{}': a {} holds only {}{}", name, dir_, layout_.kind,
       fmt::join(layout_.files, ", "), folders);
}

void DirTransaction::write(std::string_view name, std::span<const uint8_t> bytes) {
  KILN_INTERNAL_ASSERT(!committed_, "DirTransaction::write after commit");
  // write_file_atomic fsyncs the file and the temporary directory.
  write_file_atomic(temp_path(name), bytes, op_, loc_);
}

void DirTransaction::commit() {
  KILN_INTERNAL_ASSERT(!committed_, "DirTransaction::commit twice");
  for (const std::string& name : layout_.files) {
    struct stat st;
    if (::lstat((temp_dir_ + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      fail(op_, loc_, "cannot commit '{}': its file '{}' was not written", dir_, name);
  }
  const std::string old = old_path(dir_);
  const bool replacing = exists(dir_);
  auto sync_parent = [&] {
    if (int e = fsync_dir(parent_); e != 0)
      fail(op_, loc_, "cannot flush the directory '{}' to disk while saving '{}': {}", parent_,
           dir_, std::strerror(e));
  };
  int err = 0;
  if (replacing) {
    // DIR is complete, so a leftover DIR.old (a transaction that died before its last step) is
    // stale.
    if (exists(old)) {
      err = injected_fault("remove_old", old);
      if (err == 0) err = remove_layout_dir(layout_, old);
      if (err != 0)
        fail(op_, loc_, "cannot remove the leftover '{}': {} (the {} '{}' is unchanged)", old,
             std::strerror(err), layout_.kind, dir_);
    }
    err = injected_fault("rename_old", dir_);
    if (err == 0 && ::rename(dir_.c_str(), old.c_str()) != 0) err = errno;
    if (err != 0)
      fail(op_, loc_, "cannot rename '{}' to '{}': {} (the {} is unchanged)", dir_, old,
           std::strerror(err), layout_.kind);
    sync_parent();
  }
  err = injected_fault("rename_new", dir_);
  if (err == 0 && ::rename(temp_dir_.c_str(), dir_.c_str()) != 0) err = errno;
  if (err != 0) {
    // Put the previous directory back; should that fail too, readers still find it at DIR.old.
    if (replacing) ::rename(old.c_str(), dir_.c_str());
    fail(op_, loc_, "cannot rename '{}' to '{}': {} (the previous {} is kept)", temp_dir_, dir_,
         std::strerror(err), layout_.kind);
  }
  committed_ = true;
  sync_parent();
  // The new directory is complete and durable now. A DIR.old that cannot be removed is only
  // clutter, which the next transaction removes, so it does not fail this one.
  if (exists(old) && injected_fault("remove_old", old) == 0 && remove_layout_dir(layout_, old) == 0)
    fsync_dir(parent_);
}

}  // namespace kiln::io
