// Registry samples of the ops defined in kiln/ops/factories.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

// The input only says which device to make the tensor on (cpu, or meta for the meta test).
OpSample factory_sample(const char* label, std::function<Tensor(Device)> f) {
  return {label,
          {sample_tensor({}, 902)},
          [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0].device())}; },
          "",
          {},
          false};
}

KILN_REGISTER_OP_SAMPLES("full", [] {
  return std::vector<OpSample>{
      factory_sample("zeros",
                     [](Device d) {
                       return zeros({2, 3}, {DType::Float64, d});
                     }),
      factory_sample("int_value",
                     [](Device d) {
                       return full({4}, 7.0, {DType::Int32, d});
                     }),
      factory_sample(
          "channels_last",
          [](Device d) {
            return full({1, 3, 2, 2}, 0.5, {DType::Float32, d, false, MemoryFormat::kChannelsLast});
          }),
      factory_sample("scalar",
                     [](Device d) {
                       return scalar_tensor(-2.5, {DType::Float64, d});
                     }),
  };
});
KILN_REGISTER_OP_SAMPLES("arange", [] {
  return std::vector<OpSample>{
      factory_sample("int64",
                     [](Device d) {
                       return arange(1, 11, 3, TensorOptions{DType::Int64, d});
                     }),
      factory_sample("float32",
                     [](Device d) {
                       return arange(0, 1, 0.1, TensorOptions{DType::Float32, d});
                     }),
  };
});
KILN_REGISTER_OP_SAMPLES("linspace", [] {
  return std::vector<OpSample>{
      factory_sample("float64",
                     [](Device d) {
                       return linspace(-1, 2, 7, {DType::Float64, d});
                     }),
  };
});
KILN_REGISTER_OP_SAMPLES("eye", [] {
  return std::vector<OpSample>{
      factory_sample("rectangular",
                     [](Device d) {
                       return eye(3, 5, {DType::Float32, d});
                     }),
  };
});

}  // namespace

}  // namespace kiln
