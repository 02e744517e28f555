#pragma once
// Runs tests/nn/torch_nn_reference.py (Debian's python3-torch) on cases written by a test and
// returns PyTorch's results, for the live parity tests of the attention and transformer layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/nn/module.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/sample_data.h"
#include "tests/support/source_file.h"
#include "tests/support/torch_runner.h"

namespace kiln::nn::testing {

using nlohmann::json;

inline json tensor_json(const Tensor& t) {
  return {{"shape", t.shape()},
          {"dtype", dtype_name(t.dtype())},
          {"values", test::encode_values(t.to_vector<double>())}};
}

inline std::vector<double> json_values(const json& j) {
  return test::decode_values(j["values"]);
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
  const std::string script = test::source_file("tests/nn/torch_nn_reference.py");
  return test::run_torch_cases(script, cases, "nn_" + tag);
}

// Compares one case's kiln results with PyTorch's `ref`, within a tolerance for the dtype, and
// keeps the worst scaled error. Constructing it checks that torch's state_dict keys, in order, are
// the module's and, when the case starts from torch's own weights, loads them key for key.
class ModuleParity {
 public:
  ModuleParity(Module& module, const json& ref, const std::string& name, DType dtype,
               bool torch_init)
      : module_(module), ref_(ref), name_(name), tol_(dtype == DType::Float64 ? 1e-10 : 1e-5) {
    std::vector<std::string> torch_keys = ref["initial_keys"];
    EXPECT_EQ(torch_keys, names_of(module.state_dict())) << name;
    if (torch_init) module.load_state_dict(json_state(ref["initial_state"], dtype));
  }

  void check(const std::string& what, const Tensor& got, const json& want) {
    ASSERT_FALSE(want.is_null()) << name_ << ": torch has no " << what;
    ASSERT_TRUE(got.defined()) << name_ << ": kiln has no " << what;
    double err = scaled_error(got, want);
    EXPECT_LE(err, tol_) << name_ << ": " << what;
    worst_ = std::max(worst_, err);
  }

  // Checks the gradient of every parameter (and that torch has no others), then prints the worst
  // error of the case.
  void check_param_grads_and_report() {
    size_t params = 0;
    for (const auto& [pname, p] : module_.named_parameters()) {
      check(pname + ".grad", p.grad(), ref_["param_grads"][pname]);
      ++params;
    }
    EXPECT_EQ(params, ref_["param_grads"].size()) << name_;
    std::printf("[ parity ] %-42s max scaled error %.3g\n", name_.c_str(), worst_);
  }

 private:
  Module& module_;
  const json& ref_;
  std::string name_;
  double tol_;
  double worst_ = 0;
};

// Prepares one run per case (seeds `seed`, `seed` + 1000, ...), has PyTorch compute all their
// requests in one go and hands each run, with PyTorch's result for it, to compare(run, ref).
template <class Case, class Prepare, class Compare>
void compare_with_torch(const std::vector<Case>& cases, uint64_t seed, const std::string& tag,
                        Prepare prepare, Compare compare) {
  using Run = decltype(prepare(cases.front(), seed));
  std::vector<Run> runs;
  json requests = json::array();
  for (const Case& c : cases) {
    runs.push_back(prepare(c, seed));
    seed += 1000;
    requests.push_back(runs.back().request);
  }
  json results = run_torch_nn_reference(requests, tag);
  ASSERT_FALSE(results.is_null());
  ASSERT_EQ(results.size(), runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const json& ref = results[i];
    ASSERT_EQ(ref["name"], runs[i].spec.name);
    compare(runs[i], ref);
  }
}

}  // namespace kiln::nn::testing
