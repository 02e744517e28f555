#pragma once
#include <cstdint>
#include <functional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io/fault_injection.h"

namespace kiln::io {

// Note [directory transaction]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Some formats are a directory of files that must change together (a checkpoint's weights,
// optimizer state and manifest; a saved model's graph and variables), which one rename of a
// file cannot give. A DirTransaction writes them into a fresh sibling DIR.tmp-XXXXXX (each file
// fsync'ed, then the directory, by write_file_atomic), and commit() then
//   1. removes a leftover DIR.old when DIR is complete (a crash after step 3 left it),
//   2. renames DIR to DIR.old (when DIR exists),
//   3. renames DIR.tmp-XXXXXX to DIR,
//   4. removes DIR.old,
// fsync'ing the parent directory after each rename. DIR only ever comes into being by step 3,
// so whenever DIR exists it is complete; a crash between steps 2 and 3 leaves no DIR but a
// complete DIR.old, which resolve_committed_dir falls back to. So at every instant the newest
// complete directory is readable, and a failed or killed transaction never costs the previous
// one. Recovery needs no separate step and readers never write (a server may load from a
// read-only mount): readers resolve DIR or DIR.old, and the next transaction on DIR removes the
// DIR.tmp-* that crashed ones left and a stale DIR.old. One process at a time may write a
// given DIR. A transaction refuses to replace or delete a directory holding anything but the
// layout's files (and the temporary files of an interrupted write_file_atomic), so pointing it
// at a wrong directory cannot delete user data.

// What a directory of one kind holds: plain files, and optionally folders of plain files (a saved
// model's assets/) whose file names the writer chooses. Anything else (another subdirectory, a
// symlink, a folder inside a folder) counts as foreign.
struct DirLayout {
  std::string kind;                       // "checkpoint": errors read "no checkpoint at '...'"
  std::vector<std::string> files;         // every file a complete directory holds
  std::string marker;                     // one of `files` (the manifest): a DIR.old without it is
                                          // no complete directory and is never read
  std::vector<std::string> folders = {};  // optional folders of any plain files ("assets")
};

// "runs/ck/" and "runs/ck" name the same directory, and the siblings DIR.old and DIR.tmp-* need
// the name without the slash. "", "/", "." and ".." (which have no such siblings) are an error.
std::string normalize_dir_path(const std::string& dir, const DirLayout& layout, std::string_view op,
                               const std::source_location& loc = std::source_location::current());

// For readers: the directory to read for `dir` (normalized): DIR when it exists (a symlink to a
// directory is followed: "latest" -> "epoch_5"), otherwise the DIR.old that a transaction
// interrupted between its two renames left, when it holds the marker. When there is neither,
// the error names DIR. Changes nothing on disk.
std::string resolve_committed_dir(
    const std::string& dir, const DirLayout& layout, std::string_view op,
    const std::source_location& loc = std::source_location::current());

// Whether `dir` holds a directory that resolve_committed_dir would give, with its marker in it.
// Never throws.
bool committed_dir_exists(const std::string& dir, const DirLayout& layout) noexcept;

// An atomic write of a whole directory (Note [directory transaction]). The constructor
// validates DIR (absent, or a directory of this layout), creates missing parent directories,
// removes what crashed transactions left and creates the temporary directory; write() fills it;
// commit() replaces DIR. Destroyed without a successful commit(), it removes the temporary
// directory and DIR is as it was. Errors are kiln::Errors "[op] ..." naming the path and the
// caller's line.
class DirTransaction {
 public:
  DirTransaction(const std::string& dir, DirLayout layout, std::string_view op,
                 const std::source_location& loc = std::source_location::current());
  ~DirTransaction();  // never throws
  DirTransaction(const DirTransaction&) = delete;
  DirTransaction& operator=(const DirTransaction&) = delete;

  const std::string& dir() const { return dir_; }            // normalized
  const std::string& temp_dir() const { return temp_dir_; }  // DIR.tmp-XXXXXX
  // Where the layout's file `name` goes before commit, for callers that stream it through an
  // AtomicFile of their own; a name outside the layout is an error. "FOLDER/FILE" names a file in
  // one of the layout's folders (created on first use; FILE is one plain name, not "." or "..").
  std::string temp_path(std::string_view name);
  // Writes the layout's file `name` with write_file_atomic (durable once this returns).
  void write(std::string_view name, std::span<const uint8_t> bytes);
  // Steps 1-4 of the Note. Every file of the layout must have been written. Once this returns
  // the new directory is complete and durable at dir(); on error the previous one is kept.
  void commit();

 private:
  void remove_temp_dir() noexcept;

  std::string dir_;
  std::string parent_;
  std::string temp_dir_;
  DirLayout layout_;
  std::string op_;
  std::source_location loc_;
  bool committed_ = false;
};

// Fault injection for tests (Note [fault injection]): the point is asked before each directory
// step of a transaction with the step's name ("mkdir", "rename_old", "rename_new",
// "remove_old") and the path it acts on. (File writes inside the temporary directory go through
// kiln/io/atomic_file.h, whose own point covers them.)
using DirTransactionFaultHook = FaultHook;
FaultPoint& dir_transaction_faults();
inline void set_dir_transaction_fault_hook(DirTransactionFaultHook hook) {
  dir_transaction_faults().set(std::move(hook));
}

// Installs a fault hook for the lifetime of the guard (tests).
class ScopedDirTransactionFault : public ScopedFault {
 public:
  explicit ScopedDirTransactionFault(DirTransactionFaultHook hook)
      : ScopedFault(dir_transaction_faults(), std::move(hook)) {}
};

}  // namespace kiln::io
