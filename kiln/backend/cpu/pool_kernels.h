#pragma once
// Private helpers of the pooling family (pool.cpp, pool_backward.cpp): parameters, the checks the
// ops share, and the kernels (Note [pooling kernels] in pool_kernels.cpp).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiln/core/tensor.h"
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

// Kernels: inputs of any layout, contiguous outputs shaped by the ops' inference.
void max_pool_kernel(const PoolParams& p, const Tensor& x, const Tensor& values,
                     const Tensor& indices);
// Checks every index against the plane size first (in parallel, throwing nothing: Note [index
// checks] in indexing.cpp): returns the flat position of the first index out of range (the
// smallest such position, whatever the thread count) without writing anything, or -1 once the
// gradient is written.
int64_t max_pool_backward_kernel(const Tensor& grad, const Tensor& indices, const Tensor& out);
void avg_pool_kernel(const AvgParams& a, const Tensor& x, const Tensor& out);
void avg_pool_backward_kernel(const AvgParams& a, const Tensor& grad, const Tensor& out);
void adaptive_avg_pool_kernel(const Tensor& x, const Tensor& out);
void adaptive_avg_pool_backward_kernel(const Tensor& grad, const Tensor& out);

}  // namespace detail
}  // namespace kiln
