// The convolution family's CPU kernels in the kernel table (Note [kernel table]): conv2d,
// conv2d_affine, conv2d_backward_input and conv2d_backward_weight, and the family's planner (Note
// [conv planner] in kiln/ops/conv_ops.h). The definitions (attributes, infer, vjp) are in
// kiln/ops/conv.cpp, conv_affine.cpp and conv_backward.cpp; the kernels themselves in
// conv_kernels.cpp.
//
// Every kernel writes into the outputs the dispatcher allocated in infer's layout: an inference
// convolution that leaves its result in oneDNN's blocked layout does so inside that output's
// storage (Note [blocked activations]), so none of these ops needs a forward() of its own.
#include <vector>

#include "kiln/backend/onednn/conv_kernels.h"
#include "kiln/backend/onednn/conv_primitives.h"
#include "kiln/ops/conv_ops.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

using detail::ConvGeometry;

// Inputs: input, weight[, bias].
void conv2d_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const detail::Conv2dAttrs& a = detail::conv2d_attrs(op);
  const ConvGeometry g = *detail::conv_geometry(in[0].shape(), in[1].shape(), a.options);
  detail::conv_forward_kernel(g, a.policy(), in[0], in[1], in.size() > 2 ? in[2] : Tensor(),
                              out[0]);
}

// Inputs: input, weight, scale, shift[, residual].
void conv2d_affine_kernel(const Op& op, const std::vector<Tensor>& in,
                          const std::vector<Tensor>& out) {
  const detail::Conv2dAffineAttrs& a = detail::conv2d_affine_attrs(op);
  const ConvGeometry g = *detail::conv_geometry(in[0].shape(), in[1].shape(), a.options);
  const detail::ConvEpilogue ep = a.epilogue(in);
  detail::conv_epilogue_forward_kernel(g, a.policy(), in[0], in[1], ep,
                                       detail::onednn_fusable_epilogue(g, a.policy(), in[0], ep),
                                       out[0]);
}

// Inputs: grad_output, weight.
void conv2d_backward_input_kernel(const Op& op, const std::vector<Tensor>& in,
                                  const std::vector<Tensor>& out) {
  const detail::Conv2dBackwardInputAttrs& a = detail::conv2d_backward_input_attrs(op);
  const Shape xs =
      detail::conv_backward_input_shape(in[0], in[1].shape(), a.options.groups, a.input_size);
  const ConvGeometry g = *detail::conv_geometry(xs, in[1].shape(), a.options);
  detail::conv_backward_data_kernel(g, in[0], in[1], out[0]);
}

// Inputs: input, grad_output.
void conv2d_backward_weight_kernel(const Op& op, const std::vector<Tensor>& in,
                                   const std::vector<Tensor>& out) {
  const detail::Conv2dBackwardWeightAttrs& a = detail::conv2d_backward_weight_attrs(op);
  const Shape ws =
      detail::conv_backward_weight_shape(in[0], in[1], a.options.groups, a.kernel_size);
  const ConvGeometry g = *detail::conv_geometry(in[0].shape(), ws, a.options);
  detail::conv_backward_weights_kernel(g, in[0], in[1], out[0]);
}

KILN_REGISTER_KERNEL("conv2d", DeviceType::CPU, conv2d_kernel);
KILN_REGISTER_KERNEL("conv2d_affine", DeviceType::CPU, conv2d_affine_kernel);
KILN_REGISTER_KERNEL("conv2d_backward_input", DeviceType::CPU, conv2d_backward_input_kernel);
KILN_REGISTER_KERNEL("conv2d_backward_weight", DeviceType::CPU, conv2d_backward_weight_kernel);

const bool planner_registered = detail::register_conv_planner(
    {&detail::onednn_conv_output_format, &detail::onednn_fusable_epilogue,
     &detail::prefer_channels_last_training});

}  // namespace

}  // namespace kiln
