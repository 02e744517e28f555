// Registry samples of the ops defined in kiln/ops/conv_backward.cpp (Note [op registry]).
#include <fmt/format.h>
#include <string>
#include <vector>

#include "kiln/ops/conv.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

// PyTorch has no public op for these; the torch expressions take the gradient of F.conv2d at a
// zero point (the gradient of a bilinear function does not depend on that point) with
// create_graph=True, so that the result is differentiable in a0 and a1 as the kiln op is.
std::string torch_grad_input(const std::string& conv_args, const std::string& x_shape) {
  return fmt::format(
      "(lambda g, w, x: torch.autograd.grad(F.conv2d(x, w, {}), x, g, create_graph=True)[0])"
      "(a0, a1, torch.zeros({}, dtype=a0.dtype, requires_grad=True))",
      conv_args, x_shape);
}

std::string torch_grad_weight(const std::string& conv_args, const std::string& w_shape) {
  return fmt::format(
      "(lambda x, g, w: torch.autograd.grad(F.conv2d(x, w, {}), w, g, create_graph=True)[0])"
      "(a0, a1, torch.zeros({}, dtype=a0.dtype, requires_grad=True))",
      conv_args, w_shape);
}

std::vector<OpSample> backward_input_samples() {
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed); };
  auto fn = [](Size2 size, Conv2dOptions o) {
    return [size, o](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{conv2d_backward_input(in[0], in[1], size, o)};
    };
  };
  return {
      {"stride2_pad1",
       {t({2, 4, 3, 3}, 341), t({4, 3, 3, 3}, 342)},
       fn(5, {.stride = 2, .padding = 1}),
       torch_grad_input("stride=2, padding=1", "2, 3, 5, 5")},
      {"groups_dilation_same",
       {t({1, 4, 5, 6}, 343), t({4, 1, 2, 3}, 344)},
       fn({5, 6}, {.padding = "same", .dilation = {1, 2}, .groups = 2}),
       torch_grad_input("padding='same', dilation=(1, 2), groups=2", "1, 2, 5, 6")},
      // Stride 3 with a 2x2 kernel skips rows and columns 2 and 5: their gradient is zero.
      {"unused_rows_unbatched",
       {t({2, 2, 2}, 345), t({2, 3, 2, 2}, 346)},
       fn(6, {.stride = 3}),
       torch_grad_input("stride=3", "3, 6, 6")},
  };
}

std::vector<OpSample> backward_weight_samples() {
  auto t = [](Shape s, uint64_t seed) { return sample_tensor(std::move(s), seed); };
  auto fn = [](Size2 kernel, Conv2dOptions o) {
    return [kernel, o](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{conv2d_backward_weight(in[0], in[1], kernel, o)};
    };
  };
  return {
      {"stride2_pad1",
       {t({2, 3, 5, 5}, 351), t({2, 4, 3, 3}, 352)},
       fn(3, {.stride = 2, .padding = 1}),
       torch_grad_weight("stride=2, padding=1", "4, 3, 3, 3")},
      {"groups_dilation_same",
       {t({1, 4, 5, 6}, 353), t({1, 4, 5, 6}, 354)},
       fn({2, 3}, {.padding = "same", .dilation = {1, 2}, .groups = 2}),
       torch_grad_weight("padding='same', dilation=(1, 2), groups=2", "4, 2, 2, 3")},
      {"valid_unbatched",
       {t({2, 5, 4}, 355), t({3, 4, 2}, 356)},
       fn({2, 3}, {.padding = "valid"}),
       torch_grad_weight("padding='valid'", "3, 2, 2, 3")},
  };
}

KILN_REGISTER_OP_SAMPLES_THREAD_VARIANT(
    "conv2d_backward_input", backward_input_samples,
    "the weight gradient: oneDNN may split the batch between threads (Note [conv determinism])");
KILN_REGISTER_OP_SAMPLES_THREAD_VARIANT(
    "conv2d_backward_weight", backward_weight_samples,
    "its result, computed by oneDNN's weight-gradient primitive (Note [conv determinism])");

}  // namespace

}  // namespace kiln
