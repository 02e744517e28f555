// Registry samples of the op defined in kiln/ops/fused_elementwise.cpp (Note [op registry]):
// programs like the ones the fusion pass builds, so that gradcheck holds the vjp (the steps' own
// vjps on recomputed values) and meta inference, rebuild from attrs and thread invariance hold the
// op. No torch expression: the fuzzer's catalog stays as it is.
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "kiln/ops/fused_elementwise.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> fused_elementwise_samples() {
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed); };
  auto call = [](DType dtype, std::vector<FusedStep> program, std::vector<int> outputs) {
    return [=](const std::vector<Tensor>& in) {
      return fused_elementwise(in, dtype, program, outputs);
    };
  };
  const DType f64 = DType::Float64;
  std::vector<OpSample> s{
      // relu(a * b + bias), the bias broadcast along the rows
      {"mul_add_relu",
       {t({2, 3}, 501), t({2, 3}, 502), t({3}, 503)},
       call(f64, {{"mul", {}, {0, 1}}, {"add", {}, {3, 2}}, {"relu", {}, {4}}}, {5})},
      // two outputs, one of them an intermediate that a reader outside the chain needs
      {"two_outputs",
       {t({4, 1, 3}, 504), t({4, 2, 3}, 505)},
       call(f64, {{"add", {}, {0, 1}}, {"tanh", {}, {2}}, {"mul", {}, {3, 0}}}, {2, 4})},
      // a scalar of an expression (0-dim), a value read twice, attrs on a step
      {"scalar_and_attrs",
       {t({5}, 506), scalar_tensor(2.5, {.dtype = f64})},
       call(f64,
            {{"mul", {}, {0, 1}},
             {"mul", {}, {0, 0}},
             {"sub", {}, {2, 3}},
             {"clamp", {{"min", -0.5}, {"max", 0.75}}, {4}},
             {"sigmoid", {}, {5}}},
            {6}),
       "",
       {0}},
      // the gradient of relu in a chain (a backward graph's epilogue)
      {"relu_backward_chain",
       {t({3, 4}, 507), t({3, 4}, 508), t({1, 4}, 509)},
       call(f64, {{"relu_backward", {}, {0, 1}}, {"mul", {}, {3, 2}}}, {4})},
  };
  // float32, where the fusion pass forms the op in models; a channels-last-sized input.
  auto f32 = [&](Shape shape, uint64_t seed) {
    return to_dtype(t(std::move(shape), seed), DType::Float32);
  };
  s.push_back(
      {"float32_channel_affine",
       {f32({2, 3, 4, 5}, 510), f32({1, 3, 1, 1}, 511), f32({1, 3, 1, 1}, 512)},
       call(DType::Float32,
            {{"mul", {}, {0, 1}}, {"add", {}, {3, 2}}, {"gelu", {{"approximate", "tanh"}}, {4}}},
            {5}),
       "",
       {},
       /*check_grad=*/false});  // gradcheck needs float64; the float64 samples hold the vjp
  return s;
}

KILN_REGISTER_OP_SAMPLES("fused_elementwise", fused_elementwise_samples);

}  // namespace

}  // namespace kiln
