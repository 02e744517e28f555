// Registry samples of the ops defined in kiln/ops/random_factories.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

// Samples: two calls from one seeded generator draw different numbers; the registry test checks
// that each recorded op rebuilt from its attrs draws the same ones.
// The input only says which device to draw on (cpu, or meta for the meta test).
OpSample random_sample(const char* label, std::function<Tensor(Generator&, Device)> f) {
  return {label,
          {sample_tensor({}, 901)},
          [f](const std::vector<Tensor>& in) {
            Generator g(1234);
            Tensor a = f(g, in[0].device()), b = f(g, in[0].device());
            return std::vector<Tensor>{a, b};
          },
          "",
          {},
          false};
}

KILN_REGISTER_OP_SAMPLES("rand", [] {
  return std::vector<OpSample>{
      random_sample("float32",
                    [](Generator& g, Device d) {
                      return rand({3, 5}, {DType::Float32, d}, &g);
                    }),
      random_sample("float64",
                    [](Generator& g, Device d) {
                      return rand({7}, {DType::Float64, d}, &g);
                    }),
      random_sample("bfloat16",
                    [](Generator& g, Device d) {
                      return rand({6}, {DType::BFloat16, d}, &g);
                    }),
  };
});
KILN_REGISTER_OP_SAMPLES("randn", [] {
  return std::vector<OpSample>{
      random_sample("float32",
                    [](Generator& g, Device d) {
                      return randn({2, 9}, {DType::Float32, d}, &g);
                    }),
      random_sample("float64",
                    [](Generator& g, Device d) {
                      return randn({5}, {DType::Float64, d}, &g);
                    }),
  };
});
KILN_REGISTER_OP_SAMPLES("randint", [] {
  return std::vector<OpSample>{
      random_sample("small_range",
                    [](Generator& g, Device d) {
                      return randint(-3, 9, {4, 3}, {DType::Int64, d}, &g);
                    }),
      random_sample("int32",
                    [](Generator& g, Device d) {
                      return randint(0, 100, {5}, {DType::Int32, d}, &g);
                    }),
      random_sample("wide_range",
                    [](Generator& g, Device d) {
                      return randint(0, int64_t{1} << 40, {5}, {DType::Int64, d}, &g);
                    }),
  };
});
KILN_REGISTER_OP_SAMPLES("bernoulli", [] {
  return std::vector<OpSample>{
      random_sample("half",
                    [](Generator& g, Device d) {
                      return bernoulli_mask({3, 7}, 0.5, d, &g);
                    }),
  };
});

}  // namespace

}  // namespace kiln
