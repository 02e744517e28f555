// Registry samples of the ops defined in kiln/ops/conv_affine.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/conv.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> conv2d_affine_samples() {
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed); };
  auto fn = [](Conv2dOptions o, bool relu_after) {
    return [o, relu_after](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{conv2d_affine(in[0], in[1], in[2], in[3],
                                               in.size() > 4 ? in[4] : Tensor(), relu_after, o)};
    };
  };
  const std::string affine = " * a2.view(1, -1, 1, 1) + a3.view(1, -1, 1, 1)";
  std::vector<OpSample> s{
      {"affine_relu",
       {t({2, 3, 5, 5}, 401), t({4, 3, 3, 3}, 402), t({4}, 403), t({4}, 404)},
       fn({.padding = 1}, true),
       "torch.relu(F.conv2d(a0, a1, padding=1)" + affine + ")"},
      {"residual_relu_stride2",
       {t({1, 4, 6, 7}, 405), t({6, 4, 3, 3}, 406), t({6}, 407), t({6}, 408), t({1, 6, 3, 4}, 409)},
       fn({.stride = 2, .padding = 1}, true),
       "torch.relu(F.conv2d(a0, a1, stride=2, padding=1)" + affine + " + a4)"},
      {"affine_only_1x1",
       {t({2, 4, 3, 3}, 410), t({5, 4, 1, 1}, 411), t({5}, 412), t({5}, 413)},
       fn({}, false),
       "F.conv2d(a0, a1)" + affine},
  };
  // float32 without gradients is where the fused op itself runs (the others record the
  // composition), so the registry tests see the op. No torch expression: the fuzzer's catalog
  // stays as it is.
  auto f32 = [&](Shape shape, uint64_t seed) {
    return to_dtype(t(std::move(shape), seed), DType::Float32);
  };
  s.push_back({"fused_float32",
               {f32({2, 3, 6, 6}, 414), f32({4, 3, 3, 3}, 415), f32({4}, 416), f32({4}, 417),
                f32({2, 4, 6, 6}, 418)},
               fn({.padding = 1}, true)});
  // Note [low-precision conv epilogue]: bfloat16 input, weight and residual, float32 scale and
  // shift; the fused op where oneDNN has native bfloat16 kernels, the composition elsewhere.
  auto bf16 = [&](Shape shape, uint64_t seed) {
    return to_dtype(t(std::move(shape), seed), DType::BFloat16);
  };
  s.push_back({"fused_bfloat16",
               {bf16({2, 3, 6, 6}, 419), bf16({4, 3, 3, 3}, 420), f32({4}, 421), f32({4}, 422),
                bf16({2, 4, 6, 6}, 423)},
               fn({.padding = 1}, true)});
  // Not differentiable itself: conv2d_affine records the composition when a gradient is needed.
  for (OpSample& sample : s) sample.check_grad = false;
  return s;
}

KILN_REGISTER_OP_SAMPLES_THREAD_VARIANT(
    "conv2d_affine", conv2d_affine_samples,
    "the weight gradient: oneDNN may split the batch between threads (Note [conv determinism])");

}  // namespace

}  // namespace kiln
