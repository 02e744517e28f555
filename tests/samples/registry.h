#pragma once
// Note [op registry]
// ~~~~~~~~~~~~~~~~~~
// Every op family registers samples of its ops (OpSample: inputs, a call of the public API, the
// same call in PyTorch) with KILN_REGISTER_OP_SAMPLES, in a test-only file that mirrors the op
// file: the samples of kiln/ops/binary.cpp are in tests/samples/ops/binary_samples.cpp. The tests
// walk registered_ops() (gradcheck, meta inference, rebuild from attrs, PyTorch parity, the
// differential fuzzer), so an op added later is covered without editing any test. The samples
// and their PyTorch expressions are not part of the shipped library: they are the object library
// kiln_op_samples, linked whole into every test program (registration is by static
// initializers, which a static archive would drop; Note [shared library]).
//
// registered_ops() lists the op families in the order of their op files' names (ops/assign.cpp,
// ops/binary.cpp, ..., optim/sgd.cpp) and a family's ops in declaration order, whatever
// order the static initializers run in: the fuzzer draws programs from this order
// (tests/fuzz/fuzz_gen.py), so a seed keeps meaning the same program when files move.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/sample_data.h"

namespace kiln {

// One way to call an op, used by the table-driven tests (gradcheck, meta inference, PyTorch
// parity).
struct OpSample {
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  OpSample(std::string label, std::vector<Tensor> inputs, Fn fn, std::string torch = "",
           std::vector<int> grad_inputs = {}, bool check_grad = true)
      : label(std::move(label)),
        inputs(std::move(inputs)),
        fn(std::move(fn)),
        torch(std::move(torch)),
        grad_inputs(std::move(grad_inputs)),
        check_grad(check_grad) {}

  std::string label;           // "add/broadcast"
  std::vector<Tensor> inputs;  // cpu tensors; floating ones in float64
  // Calls the public API; must work on cpu and on meta copies of `inputs`.
  Fn fn;
  // The same call in PyTorch, a Python expression over a0, a1, ... (the inputs), evaluating to a
  // tensor or a tuple of tensors. Empty when PyTorch has no equivalent.
  std::string torch;
  // Inputs that gradcheck perturbs; empty means every floating input.
  std::vector<int> grad_inputs;
  bool check_grad = true;  // false for ops without a gradient at these points (argmax, compare)
  // false where the public API refuses meta tensors (an optimizer needs parameters with memory)
  bool runs_on_meta = true;
};

struct OpInfo {
  std::string name;
  std::function<std::vector<OpSample>()> samples;
  // Note [thread-count invariance]: kiln promises results bit-identical for any thread count
  // (set_num_threads) unless an op says here which of its results are not, and why. The
  // differential fuzzer checks the promise at 1 and 2 threads.
  std::string thread_variance = "";
};

// Registers `info`, declared in `source_file` (the registering file's __FILE__), which fixes its
// place in registered_ops() (Note [op registry] in tests/samples/registry.h).
bool register_op_info(OpInfo info, std::string_view source_file);
const std::vector<OpInfo>& registered_ops();

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
// KILN_REGISTER_OP_SAMPLES("add", [] { return std::vector<OpSample>{...}; });
#define KILN_REGISTER_OP_SAMPLES(name, ...)                      \
  static const bool KILN_CONCAT(kiln_op_registered_, __LINE__) = \
      ::kiln::register_op_info({name, __VA_ARGS__}, __FILE__)

// Same, for an op whose results may differ in their last bits between thread counts (say which).
#define KILN_REGISTER_OP_SAMPLES_THREAD_VARIANT(name, samples, why) \
  static const bool KILN_CONCAT(kiln_op_registered_, __LINE__) =    \
      ::kiln::register_op_info({name, samples, why}, __FILE__)

}  // namespace kiln
