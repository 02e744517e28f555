#pragma once
// Runs a PyTorch reference script (Debian's python3-torch) on cases written by a test and reads
// back its results, for the live parity tests. The scripts take an input and an output JSON path,
// both {"cases": [...]}, and spell non-finite floats as the strings "nan", "inf" and "-inf".
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::test {

// Debian's interpreter: the python3 first on PATH does not see python3-torch.
inline constexpr const char* kTorchPython = "/usr/bin/python3";

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

// Writes {"cases": cases}, runs `script` on it, returns the "cases" of its output. `name` keeps
// the temporary files of concurrent tests apart. On failure (no interpreter, no torch, a Python
// error) records a test failure saying what to install and returns null.
inline nlohmann::json run_torch_cases(const std::string& script, const nlohmann::json& cases,
                                      const std::string& name) {
  namespace fs = std::filesystem;
  if (!fs::exists(kTorchPython)) {
    ADD_FAILURE() << "live PyTorch parity needs " << kTorchPython
                  << " with Debian's PyTorch: install python3-torch (apt-get install "
                     "python3-torch)";
    return nullptr;
  }
  const fs::path dir = fs::temp_directory_path();
  const std::string stem = "kiln_" + name + "_" + std::to_string(::getpid());
  const fs::path in = dir / (stem + ".in.json"), out = dir / (stem + ".out.json");
  {
    std::ofstream f(in);
    f << nlohmann::json{{"cases", cases}}.dump();
  }
  fs::remove(out);
  const std::string cmd = std::string(kTorchPython) + " '" + script + "' '" + in.string() + "' '" +
                          out.string() + "' 2>&1";
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
    // Exit code 3: the script could not import torch and has already said what to install.
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

}  // namespace kiln::test
