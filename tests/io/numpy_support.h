#pragma once
// What the NumPy parity tests of the io formats (.npy, .npz) share: Debian's interpreter, whether
// it has NumPy, and a tensor's elements as raw bytes to compare with NumPy's.
#include <filesystem>
#include <string>

#include "kiln/core/grad_mode.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/run_command.h"

namespace kiln::io::testing {

// Debian's interpreter (python3-numpy); the first python3 on PATH does not see Debian's packages.
inline constexpr const char* kPython = "/usr/bin/python3";

// The elements of t in C order, as raw bytes.
inline std::string raw_bytes(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor c = contiguous(t);
  if (c.numel() == 0) return "";
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Whether kPython imports numpy; otherwise `why` says what to install (the test skips).
inline bool numpy_available(std::string& why) {
  if (!std::filesystem::exists(kPython)) {
    why = std::string(kPython) + " is missing; install Debian's python3-numpy";
    return false;
  }
  std::string out;
  if (test::run_command(std::string(kPython) + " -c 'import numpy'", out) != 0) {
    why = std::string(kPython) + " cannot import numpy (install python3-numpy): " + out;
    return false;
  }
  return true;
}

}  // namespace kiln::io::testing
