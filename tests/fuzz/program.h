#pragma once
// A differential-fuzzing program and its execution in kiln (Note [fuzz programs]).
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/samples/registry.h"

namespace kiln::fuzz {

// Note [fuzz programs]: a program is JSON written by tests/fuzz/fuzz.py from the catalog below.
// Values are numbered in order of appearance: first the inputs, then every output of every
// "call" step. A step reads values by number.
//
//   {"inputs": [{"sample": "add/broadcast", "arg": 0, "shape": [3, 1], "dtype": "float32",
//                "layout": "contiguous|transposed|strided|channels_last|expanded|sample",
//                "seed": 17, "requires_grad": true}, ...],
//    "steps":  [{"call": "mul/broadcast", "args": [0, 2]},
//               {"inplace": "add_|sub_|mul_|div_|clamp_|zero_|fill_|copy_", "target": 3,
//                "scalar": 0.5, "other": 1}, ...],
//    "loss_seed": 5, "retain_grads": true}
//
// An input keeps its sample's values when its shape is the sample's; otherwise values are drawn
// from `seed` within the sample input's own range (so log still sees positive numbers). The loss
// is the sum over every step output that requires grad of sum(value * weight), weights drawn from
// loss_seed; backward runs on it. Execution stops at the first step that throws; the result
// names that step (the loss and backward count as step len(steps)).

// The registry's samples that have a PyTorch expression, by "op/label".
class Catalog {
 public:
  Catalog();
  const OpSample& sample(const std::string& id) const;
  // [{"id", "op", "torch", "inputs": [{shape, dtype, strides, contiguous, min, max}],
  //   "outputs": [{shape, dtype}], "grad_inputs", "check_grad", "thread_variance"}]
  nlohmann::json describe() const;

 private:
  std::map<std::string, OpSample> samples_;
  std::vector<std::string> order_;
  std::map<std::string, nlohmann::json> outputs_;
  std::map<std::string, std::string> thread_variance_;
};

// Runs `program` once at the current thread count. The result holds, for every input, its storage
// values and geometry (so PyTorch rebuilds the identical strided tensor); for every value at the
// end, its value and requires_grad; the gradients of leaves and (with retain_grads) of step
// outputs; and "error": {"step", "kind", "message"} if a step threw.
nlohmann::json run_program(const Catalog& catalog, const nlohmann::json& program);

}  // namespace kiln::fuzz
