// Registry samples of the ops defined in kiln/ops/pool.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/pool.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = OpSample::Fn;

Tensor t(Shape s, uint64_t seed) {
  return sample_tensor(std::move(s), seed);
}

// Random inputs make ties (where max pooling has no derivative) improbable.
std::vector<OpSample> max_pool_samples(bool with_indices) {
  auto fn = [with_indices](Size2 k, MaxPool2dOptions o) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      if (!with_indices) return std::vector<Tensor>{max_pool2d(in[0], k, o)};
      auto [values, indices] = max_pool2d_with_indices(in[0], k, o);
      return std::vector<Tensor>{values, indices};
    };
  };
  const std::string ri = with_indices ? ", return_indices=True)" : ")";
  return {
      {"k2", {t({2, 3, 6, 6}, 401)}, fn(2, {}), "F.max_pool2d(a0, 2" + ri},
      {"k3_s2_pad1_ceil",
       {t({1, 2, 7, 6}, 402)},
       fn(3, {.stride = 2, .padding = 1, .ceil_mode = true}),
       "F.max_pool2d(a0, 3, 2, 1, ceil_mode=True" + ri},
      {"dilation_overlap_unbatched",
       {t({3, 7, 7}, 403)},
       fn({2, 3}, {.stride = Size2{1, 2}, .padding = 1, .dilation = 2}),
       "F.max_pool2d(a0, (2, 3), (1, 2), 1, 2" + ri},
  };
}

Fn avg_fn(Size2 k, AvgPool2dOptions o) {
  return
      [=](const std::vector<Tensor>& in) { return std::vector<Tensor>{avg_pool2d(in[0], k, o)}; };
}

std::vector<OpSample> avg_pool_samples() {
  return {
      {"k2", {t({2, 3, 6, 6}, 421)}, avg_fn(2, {}), "F.avg_pool2d(a0, 2)"},
      {"k3_s2_pad1_ceil_exclude_pad",
       {t({1, 2, 7, 6}, 422)},
       avg_fn(3, {.stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false}),
       "F.avg_pool2d(a0, 3, 2, 1, ceil_mode=True, count_include_pad=False)"},
      {"ceil_include_pad_unbatched",
       {t({3, 5, 6}, 423)},
       avg_fn({3, 2}, {.stride = 2, .padding = 1, .ceil_mode = true}),
       "F.avg_pool2d(a0, (3, 2), 2, 1, ceil_mode=True)"},
      {"divisor_override",
       {t({1, 2, 5, 5}, 424)},
       avg_fn(3, {.stride = 1, .padding = 1, .divisor_override = 4}),
       "F.avg_pool2d(a0, 3, 1, 1, divisor_override=4)"},
  };
}

Fn adaptive_fn(Size2 out) {
  return [=](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{adaptive_avg_pool2d(in[0], out)};
  };
}

std::vector<OpSample> adaptive_samples() {
  return {
      {"divides", {t({2, 3, 6, 4}, 441)}, adaptive_fn({3, 2}), "F.adaptive_avg_pool2d(a0, (3, 2))"},
      {"uneven_windows",
       {t({1, 2, 7, 5}, 442)},
       adaptive_fn({3, 4}),
       "F.adaptive_avg_pool2d(a0, (3, 4))"},
      {"larger_output_unbatched",
       {t({2, 3, 2}, 443)},
       adaptive_fn({5, 4}),
       "F.adaptive_avg_pool2d(a0, (5, 4))"},
      {"global", {t({2, 3, 5, 5}, 444)}, adaptive_fn(1), "F.adaptive_avg_pool2d(a0, 1)"},
  };
}

KILN_REGISTER_OP_SAMPLES("max_pool2d", [] { return max_pool_samples(false); });
KILN_REGISTER_OP_SAMPLES("max_pool2d_with_indices", [] { return max_pool_samples(true); });
KILN_REGISTER_OP_SAMPLES("avg_pool2d", avg_pool_samples);
KILN_REGISTER_OP_SAMPLES("adaptive_avg_pool2d", adaptive_samples);

}  // namespace

}  // namespace kiln
