#pragma once
// Runs tests/optim/torch_optim_reference.py (Debian's python3-torch) on cases written by a test
// and returns PyTorch's results, for live parity tests.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "tests/support/source_file.h"
#include "tests/support/torch_runner.h"

namespace kiln::optim::testing {

inline std::string reference_script() {
  return test::source_file("tests/optim/torch_optim_reference.py");
}

using kiln::test::decode_value;
using kiln::test::decode_values;
using kiln::test::encode_values;

// Writes {"cases": cases}, runs the script, returns its cases; null (and a test failure saying
// what to install) when PyTorch could not run.
inline nlohmann::json run_torch_reference(const nlohmann::json& cases, const std::string& tag) {
  return kiln::test::run_torch_cases(reference_script(), cases, "optim_" + tag);
}

// |a - b| <= tol * max(1, |b|); returns the largest |a - b| / max(1, |b|) seen.
inline double max_scaled_error(const std::vector<double>& kiln, const std::vector<double>& ref) {
  if (kiln.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < kiln.size(); ++i) {
    if (std::isnan(ref[i]) || std::isnan(kiln[i])) {
      if (!(std::isnan(ref[i]) && std::isnan(kiln[i])))
        return std::numeric_limits<double>::infinity();
      continue;
    }
    if (std::isinf(ref[i]) || std::isinf(kiln[i])) {
      if (ref[i] != kiln[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(kiln[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
  }
  return worst;
}

inline nlohmann::json tensor_json(const Tensor& t) {
  return {{"shape", t.shape()}, {"values", encode_values(t.to_vector<double>())}};
}

}  // namespace kiln::optim::testing
