#pragma once
// The pooling family's shared pieces: what its ops' definitions (pool.cpp, pool_backward.cpp) and
// their CPU kernels (kiln/backend/cpu/pool_ops.cpp, Note [kernel table]) both need — the
// parameters and their JSON form, the checks the ops share, and each op's attributes.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/pool.h"

namespace kiln {
namespace detail {

// Kernel, stride, padding and dilation of one pooling call (average pooling has dilation 1).
struct PoolParams {
  Size2 kernel = 1, stride = 1, padding = 0, dilation = 1;
  bool ceil_mode = false;
};

struct AvgParams {
  PoolParams p;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override = std::nullopt;
};

PoolParams max_params(Size2 kernel, const MaxPool2dOptions& o);
AvgParams avg_params(Size2 kernel, const AvgPool2dOptions& o);
AvgPool2dOptions avg_options(const AvgParams& a);

nlohmann::json pair_json(Size2 s);
nlohmann::json max_json(const PoolParams& p);
nlohmann::json avg_json(const AvgParams& a);
// Read back (Note [op factory]).
Size2 pair_from_json(const Attrs& a, const char* key);
PoolParams max_from_json(const Attrs& a);
AvgParams avg_from_json(const Attrs& a);

// [N, C, H, W] or [C, H, W], a floating dtype, non-empty C, H and W; `what` names the operand.
void check_pool_input(const char* op, const char* what, const Tensor& x, const Loc& loc);
// Checks the parameters for an input of spatial size (h, w) (described by `operand` in errors)
// and returns the output size.
Size2 check_pool_params(const char* op, const PoolParams& p, int64_t h, int64_t w,
                        const std::string& operand, const Loc& loc);
void check_avg_params(const char* op, const AvgParams& a, const Loc& loc);
void check_input_size(const char* op, Size2 size, const Loc& loc);
// grad's last two dims must be `want` (the pooling's output size).
void check_grad_spatial(const char* op, const Tensor& grad, Size2 want, const Loc& loc);

// `like`'s shape with the last two dims replaced by (h, w).
Shape with_spatial(const Shape& like, int64_t h, int64_t w);

// The attributes a kernel reads (the other pooling ops' kernels need only their tensors' shapes).
// max_pool2d and max_pool2d_with_indices (pool.cpp).
const PoolParams& max_pool_attrs(const Op& op);
// avg_pool2d (pool.cpp).
const AvgParams& avg_pool_attrs(const Op& op);
// avg_pool2d_backward (pool_backward.cpp).
const AvgParams& avg_pool_backward_attrs(const Op& op);

// max_pool2d_backward's kernel found indices[bad] outside the h x w plane: the user error
// (pool_backward.cpp owns its text; Note [kernel table]).
[[noreturn]] void fail_max_pool_indices(const Op& op, const Tensor& indices, int64_t bad, int64_t h,
                                        int64_t w);

}  // namespace detail
}  // namespace kiln
