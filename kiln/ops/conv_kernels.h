#pragma once
// Private helpers of the convolution family (conv.cpp, conv_backward.cpp): the resolved geometry
// of one convolution, option checks shared by the three ops, and the three kernels.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/op_factory.h"

namespace kiln {
namespace detail {

// One convolution with every size known: input [n, c, h, w], weight [o, c / groups, kh, kw],
// output [n, o, oh, ow], padding per side.
struct ConvGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0;
  int64_t oh = 0, ow = 0;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pb = 0, pl = 0, pr = 0;
  int64_t groups = 1;

  // Everything that shapes a primitive, for caches.
  std::string key() const;
};

// (begin, end) padding of one dim (Note [conv padding]).
std::pair<int64_t, int64_t> resolve_padding(const Padding& p, bool height, int64_t in, int64_t k,
                                            int64_t stride, int64_t dilation);

// The geometry of conv2d(input of shape x, weight of shape w): x is [N, C, H, W] or [C, H, W]
// (N = 1), w is [O, C / groups, kH, kW]. nullopt when the dilated kernel does not fit in the
// padded input. Shapes must have passed the op's checks; never throws.
std::optional<ConvGeometry> conv_geometry(const Shape& x, const Shape& w, const Conv2dOptions& o);

// Positive stride and dilation, groups > 0, non-negative padding, a known padding string.
void check_conv_options(const char* op, const Conv2dOptions& o, const Loc& loc);

// What a forward convolution was resolved for at call time (Note [conv algorithm]).
enum class ConvPurpose { kTraining, kInference };

// The explicit decision a forward convolution op holds in its attributes and its kernel reads:
// the caller's algorithm policy and the call's purpose.
struct ConvPolicy {
  ConvAlgorithm algorithm = ConvAlgorithm::kAuto;
  ConvPurpose purpose = ConvPurpose::kTraining;
  bool inference() const { return purpose == ConvPurpose::kInference; }
};

// The policy of a call with these inputs, resolved now: training when a gradient is recorded for
// it (grad mode on and an input requires grad), else inference. Only the public functions call
// this; kernels never look at grad mode.
ConvPolicy resolve_conv_policy(ConvAlgorithm algorithm, const std::vector<Tensor>& inputs);

// "auto", "direct", "winograd"; "training", "inference".
const char* conv_algorithm_name(ConvAlgorithm a);
const char* conv_purpose_name(ConvPurpose p);

// The op attributes: stride, padding ("same", "valid" or [top, bottom, left, right]), dilation,
// groups, algorithm ("auto", "direct" or "winograd").
nlohmann::json conv_attrs(const Conv2dOptions& o);
// Reads them back (Note [op factory]).
Conv2dOptions conv_options_from_attrs(const Attrs& a);
// conv_attrs plus the forward ops' "purpose" ("training" or "inference"); the policy in them.
nlohmann::json conv_forward_attrs(const Conv2dOptions& o, ConvPurpose purpose);
ConvPolicy conv_policy_from_attrs(const Attrs& a);

// "float32[8, 3, 28, 28]": conv errors print several operands, so the device is left out.
std::string short_desc(const Tensor& t);

// Rank 3 (C,H,W) or 4 (N,C,H,W), a floating dtype, and the dtype of `like` when it is defined;
// `what` names the operand in errors ("input", "grad").
void check_activation(const char* op, const char* what, const Tensor& t, const Tensor& like,
                      const Loc& loc);
// Rank 4 laid out as `layout` (e.g. "(O,C/groups,kH,kW)"), a non-empty kernel, like's dtype.
void check_weight(const char* op, const Tensor& w, const char* layout, const Tensor& like,
                  const Loc& loc);
// The error for a dilated kernel that does not fit in the padded input of spatial size (h, w);
// `operands` describes the tensors involved.
[[noreturn]] void fail_kernel_fit(const char* op, int64_t h, int64_t w, int64_t kh, int64_t kw,
                                  const Conv2dOptions& o, const std::string& operands,
                                  const Loc& loc);

// All of conv2d's checks on input x, weight w and bias b (may be undefined); returns the
// geometry of a valid call.
ConvGeometry checked_conv2d_geometry(const char* op, const Tensor& x, const Tensor& w,
                                     const Tensor& b, const Conv2dOptions& o, const Loc& loc);

// Note [conv epilogue]: what conv2d_affine fuses after a forward convolution,
// y = relu?(conv(x, w) * scale[o] + shift[o] + residual). On float32 the scale is folded into the
// weights (conv(x, w * scale) = conv(x, w) * scale per output channel), the shift is the
// convolution's bias, and oneDNN post-ops (sum for the residual, eltwise relu) finish each output
// tile while it is still in registers: the output is written once instead of being read and
// written again by channel_affine, add and relu. The folded weight is computed once and cached with
// the blocked weights (Note [conv weight cache]), keyed by the scale's values as well. Per-channel
// binary post-ops, the first version of this, ran oneDNN's direct (batched) kernels ~30% slower
// and its reference implementation when combined with sum; with folding, every batch size fuses.
struct ConvEpilogue {
  Tensor scale, shift;  // [O] each, or both undefined
  Tensor residual;      // the output's shape, or undefined
  bool relu = false;
};

// The part of ep that oneDNN runs inside the convolution's kernel: all of it for float32 (unless
// only oneDNN's reference implementation would accept it), else nothing.
// conv_epilogue_forward_kernel applies the rest after the convolution.
ConvEpilogue fusable_epilogue(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                              const ConvEpilogue& ep);

// The layout conv_forward_kernel (or, with ep, conv_epilogue_forward_kernel) wants y in for input
// x (Note [channels-last]): channels-last when the primitive that will run writes NHWC, so that
// no reorder follows it; else contiguous.
MemoryFormat conv_output_format(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                bool with_bias, const ConvEpilogue* ep = nullptr);

// The kernel a forward convolution of input x runs under policy p (with the batch size and shape;
// Note [conv algorithm], Note [conv inference kind], Note [conv winograd]): oneDNN's
// implementation name, such as "jit_wino_4x3:avx512_core", or "kiln:reference" for float64. For
// tests and diagnostics.
std::string conv_forward_implementation(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                        bool with_bias);

// Kernels (outputs are contiguous or channels-last, of the inputs' dtype; inputs may have any
// layout).
// float32 runs oneDNN, float64 the reference loops, 16-bit floats oneDNN in float32.
void conv_forward_kernel(const ConvGeometry& g, ConvPolicy p, const Tensor& x, const Tensor& w,
                         const Tensor& b, const Tensor& y);
// `done` is fusable_epilogue(g, x, ep), which the caller has already looked up for the output's
// layout: oneDNN applies it inside the kernel, the rest of ep follows as the composition.
void conv_epilogue_forward_kernel(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                  const Tensor& w, const ConvEpilogue& ep, const ConvEpilogue& done,
                                  const Tensor& y);
void conv_backward_data_kernel(const ConvGeometry& g, const Tensor& gy, const Tensor& w,
                               const Tensor& gx);
void conv_backward_weights_kernel(const ConvGeometry& g, const Tensor& x, const Tensor& gy,
                                  const Tensor& gw);

// Multiply-adds x2 of a convolution whose output (or output gradient) is `activation` and whose
// weight (or weight gradient) is `weight` [O, C/groups, kH, kW]: the forward and both backwards
// of one geometry cost the same.
inline double conv_flops(const Tensor& activation, const Tensor& weight) {
  return weight.size(0) == 0 ? 0.0
                             : 2.0 * static_cast<double>(activation.numel()) *
                                   static_cast<double>(weight.numel() / weight.size(0));
}

}  // namespace detail
}  // namespace kiln
