#pragma once
// Runs tests/nn/torch_nn_reference.py (Debian's python3-torch) on cases written by a test and
// returns PyTorch's results, for the live parity tests of the attention and transformer layers.
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

#include "kiln/core/grad_mode.h"
#include "kiln/nn/module.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/registry.h"

namespace kiln::nn::testing {

using nlohmann::json;

// Debian's interpreter: the python3 first on PATH does not see python3-torch.
inline constexpr const char* kTorchPython = "/usr/bin/python3";

inline json tensor_json(const Tensor& t) {
  json values = json::array();
  for (double v : t.to_vector<double>()) {
    if (std::isnan(v))
      values.push_back("nan");
    else if (std::isinf(v))
      values.push_back(v > 0 ? "inf" : "-inf");
    else
      values.push_back(v);
  }
  return {{"shape", t.shape()}, {"dtype", dtype_name(t.dtype())}, {"values", values}};
}

inline std::vector<double> json_values(const json& j) {
  std::vector<double> out;
  for (const auto& v : j["values"]) {
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      out.push_back(s == "nan"   ? std::numeric_limits<double>::quiet_NaN()
                    : s == "inf" ? std::numeric_limits<double>::infinity()
                                 : -std::numeric_limits<double>::infinity());
    } else {
      out.push_back(v.get<double>());
    }
  }
  return out;
}

// A tensor of `dtype` (float32, float64) from the script's JSON.
inline Tensor json_tensor(const json& j, DType dtype) {
  return tensor(json_values(j), Shape(j["shape"].get<std::vector<int64_t>>()), {dtype});
}

inline json state_json(const Module& m) {
  json out = json::object();
  for (const auto& [name, t] : m.state_dict()) out[name] = tensor_json(t);
  return out;
}

inline StateDict json_state(const json& j, DType dtype) {
  StateDict out;
  for (const auto& [name, t] : j.items()) out.emplace_back(name, json_tensor(t, dtype));
  return out;
}

// max |kiln - torch| / max(1, max |torch|) over the tensor (NaN must match NaN); infinity on a
// shape mismatch.
inline double scaled_error(const Tensor& kiln, const json& ref) {
  if (kiln.shape() != Shape(ref["shape"].get<std::vector<int64_t>>()))
    return std::numeric_limits<double>::infinity();
  std::vector<double> a = kiln.to_vector<double>(), b = json_values(ref);
  double scale = 1.0;
  for (double v : b)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (!(std::isnan(a[i]) && std::isnan(b[i]))) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(a[i] - b[i]) / scale);
  }
  return worst;
}

inline std::vector<std::string> names_of(const StateDict& sd) {
  std::vector<std::string> out;
  for (const auto& [name, t] : sd) out.push_back(name);
  return out;
}

// Overwrites every parameter with deterministic samples in [-0.5, 0.5) (biases too, so that
// they are exercised).
inline void fill_parameters(Module& m, uint64_t seed) {
  NoGradGuard no_grad;
  for (auto& [name, p] : m.named_parameters())
    p.copy_(sample_tensor(p.shape(), seed++, -0.5, 0.5).to(p.dtype()));
}

// A bool tensor of `shape` that is true where pick(flat index, coordinates) says so.
template <class F>
Tensor bool_mask(const Shape& shape, F pick) {
  std::vector<uint8_t> v(static_cast<size_t>(shape_numel(shape)));
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t flat = 0; flat < v.size(); ++flat) {
    v[flat] = pick(idx) ? 1 : 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return tensor(v, shape, {DType::Bool});
}

// Writes {"cases": cases}, runs the script, returns its cases. On failure records a test failure
// saying what to install and returns null.
inline json run_torch_nn_reference(const json& cases, const std::string& tag) {
  namespace fs = std::filesystem;
  if (!fs::exists(kTorchPython)) {
    ADD_FAILURE() << "live PyTorch parity needs " << kTorchPython
                  << " with Debian's PyTorch (apt-get install python3-torch)";
    return nullptr;
  }
  const std::string script = (fs::path(__FILE__).parent_path() / "torch_nn_reference.py").string();
  const fs::path dir = fs::temp_directory_path();
  const std::string stem = "kiln_nn_" + tag + "_" + std::to_string(::getpid());
  const fs::path in = dir / (stem + ".in.json"), out = dir / (stem + ".out.json");
  {
    std::ofstream f(in);
    f << json{{"cases", cases}}.dump();
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
    ADD_FAILURE() << "the PyTorch reference failed (exit " << code << "): " << cmd << "\n"
                  << output << "\n(if torch is missing: install python3-torch)";
    return nullptr;
  }
  std::ifstream f(out);
  json result = json::parse(f);
  fs::remove(in);
  fs::remove(out);
  return result["cases"];
}

}  // namespace kiln::nn::testing
