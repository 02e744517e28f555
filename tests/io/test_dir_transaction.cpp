// The directory transaction (Note [directory transaction] in kiln/io/dir_transaction.h): commit
// and replace, a failure or a crash at every step leaves the old or the new directory complete
// and readable, the next transaction cleans up, and bad targets are errors naming the path.
#include "kiln/io/dir_transaction.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/io/atomic_file.h"
#include "tests/io/temp_files.h"
#include "tests/support/test_util.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_contains;
using namespace testing;  // kiln::io::testing: the temporary files

const DirLayout kLayout{"bundle", {"a.bin", "b.bin", "manifest.json"}, "manifest.json"};

// Commits version `v` of the layout to dir: every file reads "<v>:<name>".
void commit_version(const std::string& dir, const std::string& v) {
  DirTransaction tx(dir, kLayout, "test_commit");
  for (const std::string& name : kLayout.files) tx.write(name, bytes_of(v + ":" + name));
  tx.commit();
}

// The version that every file of `dir` holds; "mixed" or "incomplete" when they disagree.
std::string version_of(const std::string& dir) {
  std::string version;
  for (const std::string& name : kLayout.files) {
    const std::string path = dir + "/" + name;
    if (!fs::is_regular_file(path)) return "incomplete";
    const std::string text = read_text(path);
    const std::string v = text.substr(0, text.find(':'));
    if (text != v + ":" + name || (!version.empty() && v != version)) return "mixed";
    version = v;
  }
  return version;
}

// What a reader finds at dir: the version, or "none" when there is no committed directory.
std::string readable_version(const std::string& dir) {
  if (!committed_dir_exists(dir, kLayout)) return "none";
  return version_of(resolve_committed_dir(dir, kLayout, "test_read"));
}

TEST(DirTransaction, CommitCreatesTheDirectoryAndItsParents) {
  TempRoot tmp("create");
  const std::string dir = tmp / "runs/a/d";
  commit_version(dir + "/", "1");
  EXPECT_EQ(TempRoot::entries_of(tmp / "runs/a"), std::vector<std::string>{"d"});
  EXPECT_EQ(TempRoot::entries_of(dir), kLayout.files);
  EXPECT_EQ(version_of(dir), "1");
  EXPECT_EQ(resolve_committed_dir(dir + "//", kLayout, "test_read"), dir);
  EXPECT_TRUE(committed_dir_exists(dir, kLayout));
  EXPECT_TRUE(committed_dir_exists(dir + "/", kLayout));
}

TEST(DirTransaction, CommitReplacesAndLeavesNothingBehind) {
  TempRoot tmp("replace");
  commit_version(tmp / "d", "1");
  commit_version(tmp / "d", "2");
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"d"});
  EXPECT_EQ(version_of(tmp / "d"), "2");
}

TEST(DirTransaction, AbandonedOrIncompleteTransactionChangesNothing) {
  TempRoot tmp("abandon");
  commit_version(tmp / "d", "1");
  {
    DirTransaction abandoned(tmp / "d", kLayout, "test_commit");
    abandoned.write("a.bin", bytes_of("2:a.bin"));
    EXPECT_TRUE(fs::is_directory(abandoned.temp_dir()));
    EXPECT_EQ(abandoned.temp_dir().rfind(tmp / "d.tmp-", 0), 0u) << abandoned.temp_dir();
  }
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"d"});
  {
    DirTransaction incomplete(tmp / "d", kLayout, "test_commit");
    incomplete.write("a.bin", bytes_of("2:a.bin"));
    incomplete.write("manifest.json", bytes_of("2:manifest.json"));
    expect_contains(error_of([&] { incomplete.commit(); }),
                    {"[test_commit]", "b.bin", "was not written", "test_dir_transaction.cpp"});
    expect_contains(error_of([&] { incomplete.write("c.bin", bytes_of("x")); }),
                    {"[test_commit]", "c.bin", "a bundle holds only a.bin, b.bin, manifest.json"});
  }
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"d"});
  EXPECT_EQ(version_of(tmp / "d"), "1");
}

TEST(DirTransaction, StreamedFileThroughTempPath) {
  TempRoot tmp("stream");
  DirTransaction tx(tmp / "d", kLayout, "test_commit");
  {
    AtomicFile file(tx.temp_path("a.bin"), "test_commit");
    file.write(bytes_of("3:"));
    file.write(bytes_of("a.bin"));
    file.commit();
  }
  tx.write("b.bin", bytes_of("3:b.bin"));
  tx.write("manifest.json", bytes_of("3:manifest.json"));
  tx.commit();
  EXPECT_EQ(version_of(tmp / "d"), "3");
}

// --- bad targets -------------------------------------------------------------------------------

TEST(DirTransaction, BadPathsAreErrorsNamingThePath) {
  TempRoot tmp("bad_paths");
  for (const std::string dir : {"", "/", ".", "..", "runs/.", "runs/..", "//"}) {
    SCOPED_TRACE(dir);
    expect_contains(error_of([&] { DirTransaction tx(dir, kLayout, "test_commit"); }),
                    {"[test_commit]", "expected a bundle directory path", "'" + dir + "'",
                     "test_dir_transaction.cpp"});
  }
  write_text(tmp / "file", "mine");
  expect_contains(error_of([&] { DirTransaction tx(tmp / "file", kLayout, "test_commit"); }),
                  {"[test_commit]", "'" + tmp / "file" + "'", "another kind of file"});
  expect_contains(error_of([&] { DirTransaction tx(tmp / "file/d", kLayout, "test_commit"); }),
                  {"[test_commit]", "cannot create the directory", tmp / "file"});
  EXPECT_EQ(read_text(tmp / "file"), "mine");
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"file"});
}

TEST(DirTransaction, RefusesToReplaceADirectoryWithOtherEntries) {
  TempRoot tmp("foreign");
  fs::create_directories(tmp / "d/sub");
  expect_contains(error_of([&] { commit_version(tmp / "d", "1"); }),
                  {"refusing to replace", "'sub'", "not part of a bundle"});
  fs::remove(tmp / "d/sub");
  fs::create_symlink(tmp / "elsewhere", tmp / "d/a.bin");  // a layout name, but a symlink
  expect_contains(error_of([&] { commit_version(tmp / "d", "1"); }),
                  {"refusing to replace", "'a.bin'"});
  fs::remove(tmp / "d/a.bin");
  write_text(tmp / "d/notes.txt", "mine");
  expect_contains(error_of([&] { commit_version(tmp / "d", "1"); }),
                  {"[test_commit]", "refusing to replace", tmp / "d", "notes.txt"});
  EXPECT_EQ(read_text(tmp / "d/notes.txt"), "mine");
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"d"});
  // The leftover temp file of an interrupted write_file_atomic belongs to the layout.
  fs::remove(tmp / "d/notes.txt");
  write_text(tmp / "d/a.bin.tmp.4242", "half");
  commit_version(tmp / "d", "1");
  EXPECT_EQ(version_of(tmp / "d"), "1");
}

TEST(DirTransaction, UnwritableParentIsAnErrorNamingThePath) {
  TempRoot tmp("unwritable");
  ScopedDirTransactionFault fault(
      [](std::string_view step, const std::string&) { return step == "mkdir" ? EACCES : 0; });
  expect_contains(error_of([&] { commit_version(tmp / "d", "1"); }),
                  {"[test_commit]", "cannot create a temporary directory beside", tmp / "d",
                   std::strerror(EACCES), "test_dir_transaction.cpp"});
  EXPECT_TRUE(tmp.entries().empty());
}

// The same without injection; root may write a read-only directory, so there it cannot run.
TEST(DirTransaction, ReadOnlyParentIsAnErrorNamingThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root, which may write a read-only directory";
  TempRoot tmp("read_only");
  fs::create_directory(tmp / "ro");
  fs::permissions(tmp / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  expect_contains(
      error_of([&] { commit_version(tmp / "ro/d", "1"); }),
      {"cannot create a temporary directory beside", tmp / "ro/d", std::strerror(EACCES)});
  EXPECT_TRUE(TempRoot::entries_of(tmp / "ro").empty());
}

// --- failures and crashes ----------------------------------------------------------------------

TEST(DirTransaction, FailedStepKeepsThePreviousDirectory) {
  for (const char* failing : {"mkdir", "rename_old", "rename_new"}) {
    SCOPED_TRACE(failing);
    TempRoot tmp(failing);
    commit_version(tmp / "d", "1");
    {
      ScopedDirTransactionFault fault(
          [&](std::string_view step, const std::string&) { return step == failing ? EIO : 0; });
      expect_contains(error_of([&] { commit_version(tmp / "d", "2"); }),
                      {"[test_commit]", tmp / "d", std::strerror(EIO), "test_dir_transaction.cpp"});
    }
    EXPECT_EQ(tmp.entries(), std::vector<std::string>{"d"});
    EXPECT_EQ(readable_version(tmp / "d"), "1");
    commit_version(tmp / "d", "3");
    EXPECT_EQ(readable_version(tmp / "d"), "3");
  }
}

TEST(DirTransaction, StuckOldDirectoryIsRemovedNextTime) {
  TempRoot tmp("stuck_old");
  commit_version(tmp / "d", "1");
  {
    ScopedDirTransactionFault fault(
        [](std::string_view step, const std::string&) { return step == "remove_old" ? EBUSY : 0; });
    commit_version(tmp / "d", "2");  // complete once renamed: a stuck d.old is not an error
  }
  EXPECT_EQ(tmp.entries(), (std::vector<std::string>{"d", "d.old"}));
  EXPECT_EQ(readable_version(tmp / "d"), "2");
  // A d.old with the user's files in it is never deleted; the commit refuses instead.
  write_text(tmp / "d.old/notes.txt", "mine");
  expect_contains(error_of([&] { commit_version(tmp / "d", "3"); }),
                  {"cannot remove the leftover", tmp / "d.old", "the bundle", "is unchanged"});
  EXPECT_EQ(readable_version(tmp / "d"), "2");
  fs::remove(tmp / "d.old/notes.txt");
  commit_version(tmp / "d", "3");
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"d"});
  EXPECT_EQ(readable_version(tmp / "d"), "3");
}

// A crash just before any step leaves exactly what the disk holds at that instant. The fault
// hooks copy the whole parent directory at every step of a transaction (its own and those of
// the atomic file writes inside it); every copy must read as the old version or the new one,
// never a mix, and a later transaction on the copy must succeed and leave only the directory.
TEST(DirTransaction, CrashAtEveryStepLeavesTheOldOrTheNewDirectory) {
  struct Start {
    const char* name;
    std::vector<std::string> versions;  // committed in order before the crashing one
    bool stuck_old;                     // and a d.old left behind by the last of them
  };
  for (const Start& start : {Start{"empty", {}, false}, Start{"committed", {"1"}, false},
                             Start{"stuck_old", {"0", "1"}, true}}) {
    SCOPED_TRACE(start.name);
    TempRoot tmp(std::string("crash_") + start.name);
    TempRoot snaps(std::string("snaps_") + start.name);
    const std::string dir = tmp / "d";
    for (const auto& v : start.versions) {
      ScopedDirTransactionFault fault([&](std::string_view step, const std::string&) {
        return start.stuck_old && step == "remove_old" ? EBUSY : 0;
      });
      commit_version(dir, v);
    }
    const std::string before = start.versions.empty() ? "none" : start.versions.back();

    std::vector<std::string> steps;
    auto snapshot = [&](std::string_view step, const std::string&) {
      steps.push_back(std::to_string(steps.size()) + "_" + std::string(step));
      fs::copy(tmp.path(), snaps / steps.back(), fs::copy_options::recursive);
      return 0;
    };
    {
      ScopedDirTransactionFault dir_fault(snapshot);
      ScopedAtomicFileFault file_fault(snapshot);
      commit_version(dir, "2");
    }
    EXPECT_EQ(readable_version(dir), "2");
    EXPECT_EQ(tmp.entries(), std::vector<std::string>{"d"});

    bool renamed = false;  // a snapshot after the step "rename_new" sees the new directory
    for (const std::string& step : steps) {
      SCOPED_TRACE(step);
      const std::string copy = snaps / step + "/d";
      EXPECT_EQ(readable_version(copy), renamed ? "2" : before);
      if (step.ends_with("_rename_new")) renamed = true;
      commit_version(copy, "3");
      EXPECT_EQ(TempRoot::entries_of(snaps / step), std::vector<std::string>{"d"});
      EXPECT_EQ(readable_version(copy), "3");
    }
    EXPECT_TRUE(renamed);
    // Every step was seen: the temp dir, three files of six atomic steps, the renames.
    EXPECT_EQ(std::count_if(steps.begin(), steps.end(),
                            [](const std::string& s) { return s.ends_with("_fsync_dir"); }),
              3);
    EXPECT_EQ(std::count_if(steps.begin(), steps.end(),
                            [](const std::string& s) { return s.ends_with("_rename_old"); }),
              start.versions.empty() ? 0 : 1);
  }
}

// --- readers -----------------------------------------------------------------------------------

TEST(DirTransaction, ReadersFallBackToACompleteOldDirectory) {
  TempRoot tmp("resolve");
  const std::string dir = tmp / "d";
  expect_contains(error_of([&] { resolve_committed_dir(dir, kLayout, "test_read"); }),
                  {"[test_read]", "no bundle at", "'" + dir + "'", "does not exist",
                   "test_dir_transaction.cpp"});
  EXPECT_FALSE(committed_dir_exists(dir, kLayout));
  EXPECT_FALSE(committed_dir_exists("", kLayout));

  commit_version(dir + ".old", "1");  // killed between the two renames
  EXPECT_EQ(resolve_committed_dir(dir, kLayout, "test_read"), dir + ".old");
  EXPECT_TRUE(committed_dir_exists(dir, kLayout));
  fs::remove(dir + ".old/manifest.json");  // no marker: not a complete directory
  EXPECT_FALSE(committed_dir_exists(dir, kLayout));
  expect_contains(error_of([&] { resolve_committed_dir(dir, kLayout, "test_read"); }),
                  {"no bundle at"});

  write_text(dir, "not a directory");
  expect_contains(error_of([&] { resolve_committed_dir(dir, kLayout, "test_read"); }),
                  {"[test_read]", "'" + dir + "'", "to be a bundle directory"});
  fs::remove(dir);
  commit_version(tmp / "epoch_5", "5");
  fs::create_directory_symlink(tmp / "epoch_5", dir);  // readers follow "latest" -> "epoch_5"
  EXPECT_EQ(resolve_committed_dir(dir, kLayout, "test_read"), dir);
  EXPECT_EQ(readable_version(dir), "5");
}

TEST(DirTransaction, FoldersHoldAnyPlainFilesAndAreReplacedWhole) {
  TempRoot tmp("folders");
  const DirLayout layout{"bundle", {"manifest.json"}, "manifest.json", {"assets"}};
  const std::string dir = tmp / "d";
  {
    DirTransaction tx(dir, layout, "test_commit");
    tx.write("assets/one.txt", bytes_of("1"));
    tx.write("assets/two.txt", bytes_of("2"));
    for (const std::string bad :
         {"assets/", "assets/.", "assets/..", "assets/a/b", "other/x", "assets", "../x"})
      expect_contains(error_of([&] { tx.write(bad, bytes_of("x")); }),
                      {"[test_commit]", "cannot write '" + bad + "'",
                       "holds only manifest.json and files in assets/"});
    tx.write("manifest.json", bytes_of("{}"));
    tx.commit();
  }
  EXPECT_EQ(TempRoot::entries_of(dir + "/assets"),
            (std::vector<std::string>{"one.txt", "two.txt"}));
  {  // The folder is optional, and a new directory replaces the old one with its folder.
    DirTransaction tx(dir, layout, "test_commit");
    tx.write("manifest.json", bytes_of("{}"));
    tx.commit();
  }
  EXPECT_FALSE(fs::exists(dir + "/assets"));
  // A folder inside the folder, or a folder the layout does not name, is the user's: refused.
  for (const std::string foreign : {"assets/sub", "notes"}) {
    fs::create_directories(dir + "/" + foreign);
    expect_contains(error_of([&] { DirTransaction(dir, layout, "test_commit"); }),
                    {"refusing to replace", foreign});
    fs::remove(dir + "/" + foreign);
  }
  DirTransaction(dir, layout, "test_commit");  // clean again
}

}  // namespace
}  // namespace kiln::io
