// Registry samples of the ops defined in kiln/ops/pool_backward.cpp (Note [op registry]).
#include <fmt/format.h>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/pool.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = OpSample::Fn;

Tensor t(Shape s, uint64_t seed) {
  return sample_tensor(std::move(s), seed);
}

std::vector<OpSample> max_pool_backward_samples() {
  // Indices of a real pooling with overlapping windows, so some positions receive several grads.
  auto sample = [](std::string label, Shape x, Size2 k, MaxPool2dOptions o, uint64_t seed) {
    NoGradGuard no_grad;
    const Tensor indices = max_pool2d_with_indices(t(x, seed), k, o).second;
    const Size2 size{x[x.size() - 2], x.back()};
    Shape flat = indices.shape();
    flat.back() = size.h * size.w;
    flat.erase(flat.end() - 2);
    std::string zeros = shape_str(flat);
    zeros = zeros.substr(1, zeros.size() - 2);
    std::string shape = shape_str(x);
    shape = shape.substr(1, shape.size() - 2);
    const int64_t dim = static_cast<int64_t>(x.size()) - 2;
    return OpSample{std::move(label),
                    {t(indices.shape(), seed + 1), indices},
                    [size](const std::vector<Tensor>& in) {
                      return std::vector<Tensor>{max_pool2d_backward(in[0], in[1], size)};
                    },
                    fmt::format("torch.zeros({}, dtype=a0.dtype).scatter_add({}, a1.flatten({}), "
                                "a0.flatten({})).reshape({})",
                                zeros, dim, dim, dim, shape)};
  };
  return {sample("k3_s1_overlap", {2, 3, 5, 5}, 3, {.stride = 1, .padding = 1}, 411),
          sample("k2_ceil_unbatched", {2, 5, 7}, 2, {.ceil_mode = true}, 413)};
}

// The torch side of a pooling gradient: the gradient of `pool` at a zero input, kept
// differentiable in a0 (create_graph=True) as the kiln op is.
std::string torch_pool_grad(const std::string& pool, const std::string& x_shape) {
  return fmt::format(
      "(lambda g, x: torch.autograd.grad({}, x, g, create_graph=True)[0])"
      "(a0, torch.zeros({}, dtype=a0.dtype, requires_grad=True))",
      pool, x_shape);
}

std::vector<OpSample> avg_pool_backward_samples() {
  auto fn = [](Size2 size, Size2 k, AvgPool2dOptions o) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{avg_pool2d_backward(in[0], size, k, o)};
    };
  };
  return {
      {"k3_s2_pad1_ceil_exclude_pad",
       {t({1, 2, 4, 4}, 431)},
       fn({7, 6}, 3, {.stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false}),
       torch_pool_grad("F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)",
                       "1, 2, 7, 6")},
      {"k2_s1_unbatched",
       {t({3, 4, 5}, 432)},
       fn({5, 6}, 2, {.stride = 1}),
       torch_pool_grad("F.avg_pool2d(x, 2, 1)", "3, 5, 6")},
  };
}

std::vector<OpSample> adaptive_backward_samples() {
  auto fn = [](Size2 size) -> Fn {
    return [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{adaptive_avg_pool2d_backward(in[0], size)};
    };
  };
  return {
      {"uneven_windows",
       {t({1, 2, 3, 4}, 451)},
       fn({7, 5}),
       torch_pool_grad("F.adaptive_avg_pool2d(x, (3, 4))", "1, 2, 7, 5")},
      {"larger_output_unbatched",
       {t({2, 5, 4}, 452)},
       fn({3, 2}),
       torch_pool_grad("F.adaptive_avg_pool2d(x, (5, 4))", "2, 3, 2")},
  };
}

KILN_REGISTER_OP_SAMPLES("max_pool2d_backward", max_pool_backward_samples);
KILN_REGISTER_OP_SAMPLES("avg_pool2d_backward", avg_pool_backward_samples);
KILN_REGISTER_OP_SAMPLES("adaptive_avg_pool2d_backward", adaptive_backward_samples);

}  // namespace

}  // namespace kiln
