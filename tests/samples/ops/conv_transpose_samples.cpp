// Registry samples of the ops defined in kiln/ops/conv_transpose.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/conv.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

OpSample::Fn transpose_fn(ConvTranspose2dOptions o) {
  return [o](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{conv_transpose2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), o)};
  };
}

std::vector<OpSample> conv_transpose2d_samples() {
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed); };
  return {
      {"basic_bias",
       {t({2, 3, 4, 4}, 321), t({3, 2, 3, 3}, 322), t({2}, 323)},
       transpose_fn({}),
       "F.conv_transpose2d(a0, a1, a2)"},
      {"stride2_output_padding",
       {t({1, 4, 3, 3}, 324), t({4, 3, 3, 3}, 325), t({3}, 326)},
       transpose_fn({.stride = 2, .padding = 1, .output_padding = 1}),
       "F.conv_transpose2d(a0, a1, a2, stride=2, padding=1, output_padding=1)"},
      {"groups_dilation",
       {t({2, 4, 3, 4}, 327), t({4, 1, 2, 3}, 328)},
       transpose_fn({.stride = {2, 3}, .output_padding = {1, 2}, .groups = 2, .dilation = 2}),
       "F.conv_transpose2d(a0, a1, None, stride=(2, 3), padding=0, output_padding=(1, 2), "
       "groups=2, dilation=2)"},
      {"unbatched",
       {t({3, 3, 3}, 329), t({3, 2, 2, 2}, 330), t({2}, 331)},
       transpose_fn({.stride = {2, 1}}),
       "F.conv_transpose2d(a0, a1, a2, stride=(2, 1))"},
  };
}

KILN_REGISTER_OP_SAMPLES_THREAD_VARIANT(
    "conv_transpose2d", conv_transpose2d_samples,
    "the weight gradient: oneDNN may split the batch between threads (Note [conv determinism])");

}  // namespace

}  // namespace kiln
