// The convolution planner's registration and queries (Note [conv planner]) and the backward ops'
// shapes; the ops' attribute accessors are in the ops' own files.
#include "kiln/ops/conv_ops.h"

namespace kiln {
namespace detail {

namespace {

// Written once at load time (static initialization), read afterwards.
ConvPlanner& planner() {
  static ConvPlanner p;
  return p;
}

}  // namespace

bool register_conv_planner(const ConvPlanner& p) {
  ConvPlanner& current = planner();
  KILN_INTERNAL_ASSERT(current.output_format == nullptr && current.fusable_epilogue == nullptr &&
                           current.prefers_channels_last_training == nullptr,
                       "two convolution planners registered");
  current = p;
  return true;
}

MemoryFormat conv_output_format(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                                bool with_bias, const ConvEpilogue* ep) {
  const ConvPlanner& planner_ = planner();
  return planner_.output_format != nullptr ? planner_.output_format(g, p, x, with_bias, ep)
                                           : MemoryFormat::kContiguous;
}

ConvEpilogue fusable_epilogue(const ConvGeometry& g, ConvPolicy p, const Tensor& x,
                              const ConvEpilogue& ep) {
  const ConvPlanner& planner_ = planner();
  return planner_.fusable_epilogue != nullptr ? planner_.fusable_epilogue(g, p, x, ep)
                                              : ConvEpilogue{};
}

bool conv_prefers_channels_last_training() {
  const ConvPlanner& planner_ = planner();
  return planner_.prefers_channels_last_training != nullptr &&
         planner_.prefers_channels_last_training();
}

Shape conv_backward_input_shape(const Tensor& grad, const Shape& w, int64_t groups, Size2 size) {
  if (grad.dim() == 4) return {grad.dim_size(0), w[1] * groups, size.h, size.w};
  return {w[1] * groups, size.h, size.w};
}

Shape conv_backward_weight_shape(const Tensor& x, const Tensor& grad, int64_t groups,
                                 Size2 kernel_size) {
  return {grad.dim_size(-3), x.dim_size(-3) / groups, kernel_size.h, kernel_size.w};
}

}  // namespace detail
}  // namespace kiln
