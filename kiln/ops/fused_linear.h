#pragma once
// fused_linear (kiln/ops/fused_linear.cpp) and the parts of linear it shares with it.
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {

// activation(linear(input, weight, bias)) as one op, activation "relu" or "none": oneDNN's matmul
// with the bias and the activation as post-ops, in float32 (other dtypes compute the chain). The
// graph optimizer's `linear` pass emits it for frozen graphs; within rounding of the chain (~1e-6
// relative), not bit for bit.
Tensor fused_linear(const Tensor& input, const Tensor& weight, const Tensor& bias,
                    const std::string& activation, const Loc& loc = Loc::current());

namespace detail {
// linear's inference (input [..., in], weight [out, in], bias [out] or one value), errors naming
// `op`, and its gradients given the gradient `g` of its output before any activation.
TensorMeta linear_meta(const char* op, const std::vector<Tensor>& in, bool has_bias,
                       const Loc& loc);
std::vector<Tensor> linear_grads(const VjpContext& ctx, const Tensor& g);
}  // namespace detail

}  // namespace kiln
