#pragma once
// A fresh directory for a test's files, removed with everything in it afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace kiln::test {

// Named kiln_<name>_<pid>_<running test>[_<n>] under the system's temp directory: unique across
// processes (ctest runs tests in parallel) and across the suite's tests; outside a test (a suite's
// set-up) the first free _<n> is taken.
class TempDir {
 public:
  explicit TempDir(const std::string& name = "test") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::filesystem::path base =
        std::filesystem::temp_directory_path() /
        ("kiln_" + name + "_" + std::to_string(::getpid()) +
         (info != nullptr ? std::string("_") + info->name() : std::string()));
    path_ = base;
    if (info != nullptr) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
      return;
    }
    for (int i = 0; !std::filesystem::create_directories(path_); ++i)
      path_ = base.string() + "_" + std::to_string(i);
  }
  ~TempDir() {
    std::error_code ec;  // a test may have made it read-only
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the directory.
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  // Entries of the directory, sorted (to see leftovers such as d.old or d.tmp-*).
  std::vector<std::string> entries() const { return entries_of(path_); }
  static std::vector<std::string> entries_of(const std::filesystem::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::test
