#pragma once
// Tensors as JSON for the PyTorch harnesses (parity dump, differential fuzzer).
//
// Note [parity value encoding]: values are written in row-major logical order, whatever the
// strides. Floating values go through double (float32/16 are exact in double) and nlohmann prints
// doubles so that they parse back bit-exactly. JSON has no NaN/Inf, so those become strings.
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/kiln.h"

namespace kiln::test {

inline nlohmann::json float_value(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

inline nlohmann::json encode_tensor_values(const Tensor& t) {
  nlohmann::json values = nlohmann::json::array();
  if (is_floating(t.dtype())) {
    for (double v : t.to_vector<double>()) values.push_back(float_value(v));
  } else if (t.dtype() == DType::Bool) {
    for (int64_t v : t.to_vector<int64_t>()) values.push_back(v != 0);
  } else {
    for (int64_t v : t.to_vector<int64_t>()) values.push_back(v);
  }
  return values;
}

inline nlohmann::json encode_tensor(const Tensor& t) {
  nlohmann::json j;
  j["dtype"] = dtype_name(t.dtype());
  j["shape"] = t.shape();
  j["values"] = encode_tensor_values(t);
  return j;
}

// The dtype called `name` (as dtype_name spells it); throws kiln::Error for an unknown name.
inline DType dtype_from_name(const std::string& name) {
  for (DType d : kAllDTypes)
    if (name == dtype_name(d)) return d;
  throw Error("unknown dtype name '" + name + "'");
}

}  // namespace kiln::test
