// Note [vectorized math]: a floating unary kernel runs blocks whose loops have a vector body and a
// scalar tail, around SLEEF's vector functions. An element's result must not depend on where it
// sits: each element of a 1037-element call must equal the same value computed alone (a
// one-element call takes only the tail paths), bit for bit, in float32 and float64. The same
// holds for the fused tiles, which run the same block functions.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

TEST(UnaryPositions, EveryElementGetsTheBitsItGetsAlone) {
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> fns = {
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(abs(x)); }},
      {"log1p", [](const Tensor& x) { return log1p(abs(x)); }},
      {"sqrt", [](const Tensor& x) { return sqrt(abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(abs(x)); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 3.0); }},
      {"pow 1.5", [](const Tensor& x) { return pow(abs(x), 1.5); }},
      {"pow 2", [](const Tensor& x) { return pow(x, 2.0); }},
  };
  constexpr int64_t n = 1037;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = sample_tensor({n}, 5, -4.0, 4.0).to(dtype);
    for (const auto& [name, f] : fns) {
      const std::vector<double> all = f(x).to_vector<double>();
      int64_t mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double alone = f(clone(narrow(x, 0, i, 1))).to_vector<double>()[0];
        const double got = all[static_cast<size_t>(i)];
        if (!(got == alone || (got != got && alone != alone)) && ++mismatches <= 3)
          ADD_FAILURE() << name << " " << dtype_name(dtype) << " element " << i << ": " << got
                        << " vs " << alone << " alone";
      }
      EXPECT_EQ(mismatches, 0) << name << " " << dtype_name(dtype);
    }
  }
}

}  // namespace
}  // namespace kiln
