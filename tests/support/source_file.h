#pragma once
// A file of kiln's source tree, for tests that run helper scripts (PyTorch references). CMake
// sets KILN_SOURCE_DIR for test targets, so the path does not depend on the working directory or
// on how the compiler spells __FILE__ (a launcher such as ccache may make it relative).
#include <string>

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must name kiln's source folder (set by CMakeLists.txt for test targets)"
#endif

namespace kiln::test {

inline std::string source_file(const std::string& relative) {
  return std::string(KILN_SOURCE_DIR) + "/" + relative;
}

}  // namespace kiln::test
