#pragma once
// The resolved geometry of one convolution (every size, the padding per side) and the checks of
// shapes and options that the convolution ops share: what a valid conv2d, conv2d_backward_input
// or conv2d_backward_weight call is, and the errors that say why one is not.
#include <optional>
#include <string>
#include <utility>

#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"

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

}  // namespace detail
}  // namespace kiln
