// Registry samples of the ops defined in kiln/ops/interpolate.cpp (Note [op registry]).
#include <fmt/format.h>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ops/interpolate.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = OpSample::Fn;

InterpolateOptions opts(std::optional<std::pair<int64_t, int64_t>> size,
                        std::optional<std::pair<double, double>> scale, std::string mode,
                        std::string coordinate_mode = "") {
  InterpolateOptions o;
  o.size = size;
  o.scale_factor = scale;
  o.mode = std::move(mode);
  o.coordinate_mode = std::move(coordinate_mode);
  return o;
}

Fn interp_fn(InterpolateOptions o) {
  return [=](const std::vector<Tensor>& in) { return std::vector<Tensor>{interpolate(in[0], o)}; };
}

using Size = std::pair<int64_t, int64_t>;
using Scale = std::pair<double, double>;

// PyTorch has no asymmetric bilinear resize; grid_sample with border padding and
// align_corners=True samples at src = (g + 1) / 2 * (in - 1), so g = 2 src / (in - 1) - 1.
std::string torch_asymmetric(int64_t n, int64_t ih, int64_t iw, int64_t oh, int64_t ow) {
  auto axis = [](int64_t in, int64_t out) {
    return fmt::format("torch.arange({}, dtype=a0.dtype) * ({} / {} * 2 / {}) - 1", out, in, out,
                       in - 1);
  };
  return fmt::format(
      "F.grid_sample(a0, torch.stack(torch.meshgrid({}, {}, indexing='ij')[::-1], -1)"
      ".expand({}, {}, {}, 2), mode='bilinear', padding_mode='border', align_corners=True)",
      axis(ih, oh), axis(iw, ow), n, oh, ow);
}

KILN_REGISTER_OP_SAMPLES("interpolate", [] {
  const std::string f = "F.interpolate(a0, ";
  return std::vector<OpSample>{
      {"nearest_size",
       {sample_tensor({1, 2, 4, 3}, 701)},
       interp_fn(opts(Size{7, 5}, std::nullopt, "nearest")),
       f + "size=(7, 5), mode='nearest')"},
      {"nearest_scale_strided",
       {permute(sample_tensor({2, 4, 3, 1}, 702), {0, 3, 2, 1})},
       interp_fn(opts(std::nullopt, Scale{2.0, 1.5}, "nearest")),
       f + "scale_factor=(2.0, 1.5), mode='nearest')"},
      {"nearest_half_pixel",
       {sample_tensor({1, 1, 3, 5}, 703)},
       interp_fn(opts(Size{5, 3}, std::nullopt, "nearest", "half_pixel")),
       f + "size=(5, 3), mode='nearest-exact')"},
      {"bilinear_align_corners",
       {sample_tensor({1, 2, 3, 4}, 704)},
       interp_fn(opts(Size{7, 5}, std::nullopt, "bilinear", "align_corners")),
       f + "size=(7, 5), mode='bilinear', align_corners=True)"},
      {"bilinear_default_down",
       {sample_tensor({1, 2, 5, 4}, 705)},
       interp_fn(opts(Size{3, 2}, std::nullopt, "bilinear")),
       f + "size=(3, 2), mode='bilinear', align_corners=False)"},
      {"bilinear_scale_factor",
       {sample_tensor({2, 1, 3, 4}, 706)},
       interp_fn(opts(std::nullopt, Scale{1.7, 0.6}, "bilinear", "align_corners_false")),
       f + "scale_factor=(1.7, 0.6), mode='bilinear', align_corners=False)"},
      {"bilinear_asymmetric",
       {sample_tensor({1, 2, 3, 4}, 707)},
       interp_fn(opts(Size{5, 7}, std::nullopt, "bilinear", "asymmetric")),
       torch_asymmetric(1, 3, 4, 5, 7)},
      // PyTorch's align_corners=False at an output size of 1: H 4 -> 1 samples the centre,
      // src = 1.5 (the mean of rows 1 and 2), as half_pixel; ONNX's pytorch_half_pixel would
      // take row 0.
      {"bilinear_default_size_one",
       {sample_tensor({1, 2, 4, 3}, 709)},
       interp_fn(opts(Size{1, 3}, std::nullopt, "bilinear")),
       f + "size=(1, 3), mode='bilinear', align_corners=False)"},
      {"bilinear_half_pixel_size_one",
       {sample_tensor({1, 2, 4, 3}, 708)},
       interp_fn(opts(Size{1, 3}, std::nullopt, "bilinear", "half_pixel")),
       "0.5 * (a0[:, :, 1:2] + a0[:, :, 2:3])"},
  };
});

std::string torch_interp_grad(const std::string& args, const std::string& input_shape) {
  return "(lambda x, g: torch.autograd.grad(F.interpolate(x, " + args +
         "), x, g, create_graph=True)[0])(torch.zeros(" + input_shape +
         ", dtype=a0.dtype, requires_grad=True), a0)";
}

Fn interp_backward_fn(Shape input_shape, InterpolateOptions o) {
  return [=](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{interpolate_backward(in[0], input_shape, o)};
  };
}

KILN_REGISTER_OP_SAMPLES("interpolate_backward", [] {
  return std::vector<OpSample>{
      {"bilinear_align_corners",
       {sample_tensor({1, 2, 5, 4}, 711)},
       interp_backward_fn({1, 2, 3, 3},
                          opts(Size{5, 4}, std::nullopt, "bilinear", "align_corners")),
       torch_interp_grad("size=(5, 4), mode='bilinear', align_corners=True", "1, 2, 3, 3")},
      {"bilinear_default_scale",
       {sample_tensor({2, 1, 3, 6}, 712)},
       interp_backward_fn({2, 1, 5, 4}, opts(std::nullopt, Scale{0.7, 1.5}, "bilinear")),
       torch_interp_grad("scale_factor=(0.7, 1.5), mode='bilinear', align_corners=False",
                         "2, 1, 5, 4")},
      {"nearest_size",
       {sample_tensor({1, 2, 5, 7}, 713)},
       interp_backward_fn({1, 2, 3, 3}, opts(Size{5, 7}, std::nullopt, "nearest")),
       torch_interp_grad("size=(5, 7), mode='nearest'", "1, 2, 3, 3")},
  };
});

}  // namespace

}  // namespace kiln
