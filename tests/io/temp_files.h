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

#include "tests/support/temp_dir.h"

namespace kiln::io::testing {

// A fresh directory named after `name` and the running test, removed afterwards.
using TempRoot = test::TempDir;

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
