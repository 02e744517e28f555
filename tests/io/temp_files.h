#pragma once
// Files on disk for the io tests: a fresh directory per test and whole-file reads and writes
// that bypass the code under test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace kiln::io::testing {

// A fresh directory named after `name` and the running test, removed afterwards.
class TempRoot {
 public:
  explicit TempRoot(const std::string& name)
      : root_(std::filesystem::temp_directory_path() /
              ("kiln_io_" + std::to_string(::getpid()) + "_" + name + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~TempRoot() {
    std::error_code ec;  // a test may have made it read-only
    std::filesystem::permissions(root_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(root_, ec);
  }
  TempRoot(const TempRoot&) = delete;
  TempRoot& operator=(const TempRoot&) = delete;

  std::string operator/(const std::string& name) const { return (root_ / name).string(); }
  const std::filesystem::path& path() const { return root_; }
  // Entries of the root, sorted (to see leftovers such as d.old or d.tmp-*).
  std::vector<std::string> entries() const { return entries_of(root_); }
  static std::vector<std::string> entries_of(const std::filesystem::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path root_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

inline std::span<const uint8_t> bytes_of(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace kiln::io::testing
