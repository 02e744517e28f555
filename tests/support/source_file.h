#pragma once
// A file of kiln's source tree, for tests that run helper scripts (PyTorch references). The path
// comes from tests/support/source_file.cpp, the one test file compiled with the source folder's
// absolute path (Note [compiler cache] in CMakeLists.txt), so it depends neither on the working
// directory nor on how the compiler spells __FILE__ (ccache makes it relative).
#include <string>

namespace kiln::test {

std::string source_file(const std::string& relative);

}  // namespace kiln::test
