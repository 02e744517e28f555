#include "tests/support/source_file.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must name kiln's source folder (set by CMakeLists.txt for this file)"
#endif

namespace kiln::test {

std::string source_file(const std::string& relative) {
  return std::string(KILN_SOURCE_DIR) + "/" + relative;
}

}  // namespace kiln::test
