// Registry samples of the ops defined in kiln/ops/conv.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/conv.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

OpSample::Fn conv_fn(Conv2dOptions o) {
  return [o](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), o)};
  };
}

// Sample values stay in [-1, 1]: convolution is bilinear, so every point is smooth.
std::vector<OpSample> conv2d_samples() {
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed); };
  return {
      {"basic_bias",
       {t({2, 3, 5, 5}, 301), t({4, 3, 3, 3}, 302), t({4}, 303)},
       conv_fn({}),
       "F.conv2d(a0, a1, a2)"},
      {"stride2_pad1_uneven",
       {t({2, 3, 6, 5}, 304), t({4, 3, 3, 2}, 305), t({4}, 306)},
       conv_fn({.stride = 2, .padding = 1}),
       "F.conv2d(a0, a1, a2, stride=2, padding=1, dilation=1, groups=1)"},
      {"groups_dilation_nobias",
       {t({2, 4, 7, 6}, 307), t({6, 2, 3, 2}, 308)},
       conv_fn({.stride = {1, 2}, .padding = {1, 0}, .dilation = {2, 1}, .groups = 2}),
       "F.conv2d(a0, a1, None, stride=(1, 2), padding=(1, 0), dilation=(2, 1), groups=2)"},
      {"same_even_kernel",
       {t({1, 2, 5, 6}, 309), t({3, 2, 2, 4}, 310), t({3}, 311)},
       conv_fn({.padding = "same"}),
       "F.conv2d(a0, a1, a2, padding='same')"},
      // TensorFlow's SAME with stride 2 (PyTorch has none): H 5 -> pad (1, 1), W 6 -> (0, 1).
      {"same_stride2",
       {t({1, 2, 5, 6}, 312), t({3, 2, 3, 3}, 313), t({3}, 314)},
       conv_fn({.stride = 2, .padding = "same"}),
       "F.conv2d(F.pad(a0, (0, 1, 1, 1)), a1, a2, stride=2)"},
      {"valid_unbatched",
       {t({3, 5, 4}, 315), t({2, 3, 2, 2}, 316)},
       conv_fn({.padding = "valid"}),
       "F.conv2d(a0, a1, padding='valid')"},
      {"channels_last_view",
       {t({2, 4, 5, 3}, 317).permute({0, 3, 1, 2}), t({2, 3, 3, 3}, 318)},
       conv_fn({.padding = 1}),
       "F.conv2d(a0, a1, padding=1)"},
  };
}

KILN_REGISTER_OP_SAMPLES_THREAD_VARIANT(
    "conv2d", conv2d_samples,
    "the weight gradient: oneDNN may split the batch between threads (Note [conv determinism])");

}  // namespace

}  // namespace kiln
