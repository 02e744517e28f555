#pragma once
// Runs tests/optim/torch_optim_reference.py (Debian's python3-torch) on cases written by a test
// and returns PyTorch's results, for live parity tests.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim::testing {

// Debian's interpreter: the python3 first on PATH does not see python3-torch.
inline constexpr const char* kTorchPython = "/usr/bin/python3";

// The script sits beside this header; __FILE__ is absolute in this build (CMake passes absolute
// source paths), so the test finds it from any working directory.
inline std::string reference_script() {
  return (std::filesystem::path(__FILE__).parent_path() / "torch_optim_reference.py").string();
}

inline nlohmann::json encode_values(const std::vector<double>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (double v : values) {
    if (std::isnan(v))
      out.push_back("nan");
    else if (std::isinf(v))
      out.push_back(v > 0 ? "inf" : "-inf");
    else
      out.push_back(v);
  }
  return out;
}

inline double decode_value(const nlohmann::json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    return s == "inf" ? std::numeric_limits<double>::infinity()
                      : -std::numeric_limits<double>::infinity();
  }
  return j.get<double>();
}

inline std::vector<double> decode_values(const nlohmann::json& j) {
  std::vector<double> out;
  for (const auto& v : j) out.push_back(decode_value(v));
  return out;
}

// Writes {"cases": cases}, runs the script, returns its {"cases": [...]} output. On failure
// (no interpreter, no torch, a Python error) records a test failure saying what to install and
// returns null.
inline nlohmann::json run_torch_reference(const nlohmann::json& cases, const std::string& tag) {
  namespace fs = std::filesystem;
  if (!fs::exists(kTorchPython)) {
    ADD_FAILURE() << "live PyTorch parity needs " << kTorchPython
                  << " with Debian's PyTorch: install python3-torch (apt-get install "
                     "python3-torch)";
    return nullptr;
  }
  const fs::path dir = fs::temp_directory_path();
  const std::string stem = "kiln_optim_" + tag + "_" + std::to_string(::getpid());
  const fs::path in = dir / (stem + ".in.json"), out = dir / (stem + ".out.json");
  {
    std::ofstream f(in);
    f << nlohmann::json{{"cases", cases}}.dump();
  }
  fs::remove(out);
  const std::string cmd = std::string(kTorchPython) + " '" + reference_script() + "' '" +
                          in.string() + "' '" + out.string() + "' 2>&1";
  std::string output;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "could not run " << cmd;
    return nullptr;
  }
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  const int status = ::pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) {
    ADD_FAILURE() << "the PyTorch reference failed (exit " << code << "): " << cmd << "\n"
                  << output << (code == 3 ? "" : "\n(if torch is missing: install python3-torch)");
    return nullptr;
  }
  std::ifstream f(out);
  nlohmann::json result = nlohmann::json::parse(f);
  fs::remove(in);
  fs::remove(out);
  return result["cases"];
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
