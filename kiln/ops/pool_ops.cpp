// The pooling family's parameters, their JSON form and the checks its ops share (pool_ops.h).
#include "kiln/ops/pool_ops.h"

#include <vector>

namespace kiln {
namespace detail {

namespace {

// PyTorch's pooling_output_shape: floor or ceil division, and with ceil_mode the last window
// must start inside the input or the left padding.
int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                      bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace

PoolParams max_params(Size2 kernel, const MaxPool2dOptions& o) {
  return {kernel, o.stride.value_or(kernel), o.padding, o.dilation, o.ceil_mode};
}

AvgParams avg_params(Size2 kernel, const AvgPool2dOptions& o) {
  return {{kernel, o.stride.value_or(kernel), o.padding, 1, o.ceil_mode},
          o.count_include_pad,
          o.divisor_override};
}

AvgPool2dOptions avg_options(const AvgParams& a) {
  return {a.p.stride, a.p.padding, a.p.ceil_mode, a.count_include_pad, a.divisor_override};
}

nlohmann::json pair_json(Size2 s) {
  return {s.h, s.w};
}

nlohmann::json max_json(const PoolParams& p) {
  return {{"kernel_size", pair_json(p.kernel)},
          {"stride", pair_json(p.stride)},
          {"padding", pair_json(p.padding)},
          {"dilation", pair_json(p.dilation)},
          {"ceil_mode", p.ceil_mode}};
}

// A tensor's [N, C, H, W] or [C, H, W]: rank, floating dtype, non-empty C, H, W.
void check_pool_input(const char* op, const char* what, const Tensor& x, const Loc& loc) {
  if (x.dim() != 3 && x.dim() != 4)
    fail(op, loc, "expected {} of rank 3 (C,H,W) or 4 (N,C,H,W), but got {}", what, x.describe());
  if (!is_floating(x.dtype()))
    fail(op, loc, "expected a floating-point {}, but got {}", what, x.describe());
  if (x.dim_size(-1) == 0 || x.dim_size(-2) == 0 || x.dim_size(-3) == 0)
    fail(op, loc, "expected {} with non-empty C, H and W dims, but got {}", what, x.describe());
}

// Checks the parameters for an input of spatial size (h, w) and returns the output size.
Size2 check_pool_params(const char* op, const PoolParams& p, int64_t h, int64_t w,
                        const std::string& operand, const Loc& loc) {
  const Size2 sizes[] = {p.kernel, p.stride, p.dilation};
  const char* names[] = {"kernel_size", "stride", "dilation"};
  for (int i = 0; i < 3; ++i)
    if (sizes[i].h <= 0 || sizes[i].w <= 0)
      fail(op, loc, "expected a positive {}, but got [{}, {}]", names[i], sizes[i].h, sizes[i].w);
  if (p.padding.h < 0 || p.padding.w < 0 || p.padding.h > p.kernel.h / 2 ||
      p.padding.w > p.kernel.w / 2)
    fail(op, loc,
         "expected padding between 0 and half the kernel size, but got padding [{}, {}] for "
         "kernel_size [{}, {}]",
         p.padding.h, p.padding.w, p.kernel.h, p.kernel.w);
  const int64_t oh =
      pool_out_size(h, p.kernel.h, p.padding.h, p.stride.h, p.dilation.h, p.ceil_mode);
  const int64_t ow =
      pool_out_size(w, p.kernel.w, p.padding.w, p.stride.w, p.dilation.w, p.ceil_mode);
  if (oh <= 0 || ow <= 0)
    fail(op, loc,
         "expected an output of at least 1x1, but got {}x{} for {} (kernel_size [{}, {}], stride "
         "[{}, {}], padding [{}, {}], dilation [{}, {}])",
         oh, ow, operand, p.kernel.h, p.kernel.w, p.stride.h, p.stride.w, p.padding.h, p.padding.w,
         p.dilation.h, p.dilation.w);
  return {oh, ow};
}

// `like`'s shape with the last two dims replaced.
Shape with_spatial(const Shape& like, int64_t h, int64_t w) {
  Shape s = like;
  s[s.size() - 2] = h;
  s[s.size() - 1] = w;
  return s;
}

void check_grad_spatial(const char* op, const Tensor& grad, Size2 want, const Loc& loc) {
  if (grad.dim_size(-2) != want.h || grad.dim_size(-1) != want.w)
    fail(op, loc, "expected grad of spatial size {}x{} (the pooling output), but got {}", want.h,
         want.w, grad.describe());
}

void check_input_size(const char* op, Size2 size, const Loc& loc) {
  if (size.h <= 0 || size.w <= 0)
    fail(op, loc, "expected a positive input_size, but got [{}, {}]", size.h, size.w);
}

nlohmann::json avg_json(const AvgParams& a) {
  nlohmann::json j = max_json(a.p);
  j.erase("dilation");
  j["count_include_pad"] = a.count_include_pad;
  j["divisor_override"] = a.divisor_override ? nlohmann::json(*a.divisor_override) : nullptr;
  return j;
}

Size2 pair_from_json(const Attrs& a, const char* key) {
  std::vector<int64_t> v = a.ints(key);
  if (v.size() != 2) a.fail(key, "must hold 2 integers (h, w)");
  return {v[0], v[1]};
}

PoolParams max_from_json(const Attrs& a) {
  PoolParams p;
  p.kernel = pair_from_json(a, "kernel_size");
  p.stride = pair_from_json(a, "stride");
  p.padding = pair_from_json(a, "padding");
  if (a.has("dilation")) p.dilation = pair_from_json(a, "dilation");
  p.ceil_mode = a.b("ceil_mode");
  return p;
}

AvgParams avg_from_json(const Attrs& a) {
  return {max_from_json(a), a.b("count_include_pad"), a.opt_i("divisor_override")};
}

void check_avg_params(const char* op, const AvgParams& a, const Loc& loc) {
  if (a.divisor_override && *a.divisor_override == 0)
    fail(op, loc, "expected a non-zero divisor_override, but got 0");
}

}  // namespace detail
}  // namespace kiln
