// Runs every registered op sample that names a PyTorch equivalent, forward and backward, in float64
// and float32, and writes inputs, outputs, seeds and gradients to one JSON file. check_parity.py
// replays the same cases in PyTorch and compares. Nothing here names an op: an op added later is
// covered as soon as it registers samples with a `torch` expression.
//
// Usage: kiln_parity_dump OUT.json [SUBSTRING]   (SUBSTRING filters cases by "op/label")
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "tests/samples/registry.h"
#include "tests/support/tensor_json.h"

namespace kiln {
namespace {

using nlohmann::json;

json encode(const Tensor& t) {
  return test::encode_tensor(t);
}

bool wants_grad(const OpSample& s, size_t i) {
  if (!s.check_grad || !is_floating(s.inputs[i].dtype())) return false;
  if (s.grad_inputs.empty()) return true;
  for (int g : s.grad_inputs)
    if (g == static_cast<int>(i)) return true;
  return false;
}

// Only float64 inputs follow the mode: a sample that deliberately passes another floating dtype
// (to exercise promotion) keeps it, so the case still tests what its author meant.
bool follows_mode(const Tensor& t) {
  return t.dtype() == DType::Float64;
}

// Converts keeping the sample's memory geometry (transposed, expanded, offset views), so the
// float32 run exercises the same strided kernel paths as the float64 one.
Tensor convert_keeping_layout(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  if (t.is_contiguous() && t.storage_offset() == 0) return to_dtype(t, dtype);
  auto n = static_cast<int64_t>(t.storage()->nbytes() / itemsize(t.dtype()));
  Tensor all = to_dtype(make_view(t, {n}, {1}, 0), dtype);
  return make_view(all, t.shape(), t.strides(), t.storage_offset());
}

json run_case(const std::string& op, const OpSample& s, DType mode) {
  json c;
  c["op"] = op;
  c["label"] = s.label;
  c["torch"] = s.torch;
  c["mode"] = dtype_name(mode);
  c["check_grad"] = s.check_grad;
  try {
    std::vector<Tensor> inputs;
    {
      NoGradGuard no_grad;
      for (const Tensor& t : s.inputs)
        inputs.push_back((follows_mode(t) ? convert_keeping_layout(t, mode) : t).detach());
    }
    std::vector<Tensor> leaves;
    json jin = json::array();
    for (size_t i = 0; i < inputs.size(); ++i) {
      bool rg = wants_grad(s, i);
      if (rg) {
        inputs[i].set_requires_grad(true);
        leaves.push_back(inputs[i]);
      }
      json ji = encode(inputs[i]);
      ji["requires_grad"] = rg;
      ji["strides"] = inputs[i].strides();  // informational: torch rebuilds contiguous inputs
      jin.push_back(std::move(ji));
    }
    c["inputs"] = std::move(jin);

    std::vector<Tensor> outputs = s.fn(inputs);
    std::vector<Tensor> diff_outputs, seeds;
    json jout = json::array(), jseeds = json::array();
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& o = outputs[i];
      bool rg = is_floating(o.dtype()) && o.requires_grad();
      json jo = encode(o);
      jo["requires_grad"] = rg;
      jout.push_back(std::move(jo));
      if (!rg) {
        jseeds.push_back(nullptr);
        continue;
      }
      Tensor seed;
      {
        NoGradGuard no_grad;
        seed = to_dtype(sample_tensor(o.shape(), 1000 + i, 0.5, 1.5), o.dtype());
      }
      diff_outputs.push_back(o);
      seeds.push_back(seed);
      jseeds.push_back(encode(seed));
    }
    c["outputs"] = std::move(jout);
    c["seeds"] = std::move(jseeds);

    json jgrads = json::array();
    for (size_t i = 0; i < inputs.size(); ++i) jgrads.push_back(nullptr);
    if (!diff_outputs.empty() && !leaves.empty()) {
      try {
        std::vector<Tensor> g = grad(diff_outputs, leaves, seeds, false, false, true);
        size_t k = 0;
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (!wants_grad(s, i)) continue;
          if (g[k].defined()) jgrads[i] = encode(g[k]);
          ++k;
        }
      } catch (const std::exception& e) {
        c["grad_error"] = e.what();
      }
    }
    c["grads"] = std::move(jgrads);
  } catch (const std::exception& e) {
    c["error"] = e.what();
  }
  return c;
}

int main_impl(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: kiln_parity_dump OUT.json [SUBSTRING]\n";
    return 2;
  }
  std::string filter = argc == 3 ? argv[2] : "";
  json cases = json::array();
  std::vector<std::string> without_torch;
  for (const OpInfo& info : registered_ops()) {
    for (const OpSample& s : info.samples()) {
      if (s.torch.empty()) {
        without_torch.push_back(info.name + "/" + s.label);
        continue;
      }
      if (!filter.empty() && (info.name + "/" + s.label).find(filter) == std::string::npos)
        continue;
      bool any_float64 = false;
      for (const Tensor& t : s.inputs) any_float64 |= follows_mode(t);
      cases.push_back(run_case(info.name, s, DType::Float64));
      // Without float64 inputs the float32 run would repeat the float64 one.
      if (any_float64) cases.push_back(run_case(info.name, s, DType::Float32));
    }
  }
  std::ofstream out(argv[1]);
  if (!out) {
    std::cerr << "kiln_parity_dump: cannot write " << argv[1] << "\n";
    return 1;
  }
  out << json{{"version", 1}, {"cases", cases}}.dump() << "\n";
  out.close();
  if (!out) {
    std::cerr << "kiln_parity_dump: error writing " << argv[1] << "\n";
    return 1;
  }
  std::cout << "kiln_parity_dump: wrote " << cases.size() << " cases to " << argv[1] << "\n";
  if (!without_torch.empty()) {
    std::cout << "kiln_parity_dump: " << without_torch.size()
              << " samples have no torch expression:";
    for (const std::string& name : without_torch) std::cout << " " << name;
    std::cout << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  return kiln::main_impl(argc, argv);
}
