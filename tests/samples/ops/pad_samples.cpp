// Registry samples of the ops defined in kiln/ops/pad.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/pad.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = OpSample::Fn;

Fn pad_fn(std::vector<int64_t> pads, std::string mode, double value = 0.0) {
  return [=](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{pad(in[0], pads, mode, value)};
  };
}

KILN_REGISTER_OP_SAMPLES("pad", [] {
  return std::vector<OpSample>{
      {"constant_negative_crops",
       {sample_tensor({2, 3, 4}, 601)},
       pad_fn({1, -1, 2, 0}, "constant", 0.5),
       "F.pad(a0, (1, -1, 2, 0), value=0.5)"},
      {"constant_three_dims",
       {sample_tensor({2, 3, 2}, 602)},
       pad_fn({0, 1, 1, 0, 1, 1}, "constant"),
       "F.pad(a0, (0, 1, 1, 0, 1, 1))"},
      {"reflect_1d",
       {sample_tensor({2, 3, 5}, 603)},
       pad_fn({2, 3}, "reflect"),
       "F.pad(a0, (2, 3), mode='reflect')"},
      {"reflect_2d",
       {sample_tensor({1, 2, 3, 4}, 604)},
       pad_fn({1, 2, 2, 1}, "reflect"),
       "F.pad(a0, (1, 2, 2, 1), mode='reflect')"},
      {"replicate_2d_strided",
       {permute(sample_tensor({2, 4, 3}, 605), {0, 2, 1})},
       pad_fn({2, 1, 1, 3}, "replicate"),
       "F.pad(a0, (2, 1, 1, 3), mode='replicate')"},
      {"replicate_1d",
       {sample_tensor({2, 3}, 606)},
       pad_fn({3, 1}, "replicate"),
       "F.pad(a0, (3, 1), mode='replicate')"},
  };
});

// PyTorch has no public pad_backward: the reference differentiates F.pad with create_graph so
// that the gradient of the gradient is compared too. (An eval'd lambda sees only globals, so
// a0 is passed in.)
std::string torch_pad_grad(const std::string& pad_args, const std::string& input_shape) {
  return "(lambda x, g: torch.autograd.grad(F.pad(x, " + pad_args +
         "), x, g, create_graph=True)[0])(torch.zeros(" + input_shape +
         ", dtype=a0.dtype, requires_grad=True), a0)";
}

Fn pad_backward_fn(Shape input_shape, std::vector<int64_t> pads, std::string mode) {
  return [=](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{pad_backward(in[0], input_shape, pads, mode)};
  };
}

KILN_REGISTER_OP_SAMPLES("pad_backward", [] {
  return std::vector<OpSample>{
      {"reflect_2d",
       {sample_tensor({1, 2, 6, 7}, 611)},
       pad_backward_fn({1, 2, 3, 4}, {1, 2, 2, 1}, "reflect"),
       torch_pad_grad("(1, 2, 2, 1), mode='reflect'", "1, 2, 3, 4")},
      {"replicate_1d",
       {sample_tensor({2, 3, 9}, 612)},
       pad_backward_fn({2, 3, 5}, {3, 1}, "replicate"),
       torch_pad_grad("(3, 1), mode='replicate'", "2, 3, 5")},
      {"constant_crop",
       {sample_tensor({2, 3, 4}, 613)},
       pad_backward_fn({2, 1, 4}, {1, -1, 2, 0}, "constant"),
       torch_pad_grad("(1, -1, 2, 0)", "2, 1, 4")},
  };
});

}  // namespace

}  // namespace kiln
