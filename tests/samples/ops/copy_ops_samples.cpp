// Registry samples of the ops defined in kiln/ops/copy_ops.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
template <class F>
Fn one(F f) {
  return [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; };
}

KILN_REGISTER_OP_SAMPLES("clone", [] {
  return std::vector<OpSample>{
      {"strided",
       {sample_tensor({3, 4}, 51).t()},
       one([](const Tensor& x) { return clone(x); }),
       "a0.clone()"},
      {"contiguous",
       {sample_tensor({3, 4}, 52).t()},
       one([](const Tensor& x) { return contiguous(x); }),
       "a0.contiguous()"},
  };
});

KILN_REGISTER_OP_SAMPLES("to_dtype", [] {
  return std::vector<OpSample>{
      {"to_float32_and_back",
       {sample_tensor({3, 4}, 61)},
       one([](const Tensor& x) { return to_dtype(to_dtype(x, DType::Float32), DType::Float64); }),
       "",
       {},
       false},
  };
});

}  // namespace

}  // namespace kiln
