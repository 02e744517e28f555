#pragma once
// int8 quantized inference ops: activations quantized per tensor, weights per output channel,
// integer products accumulated in int32 and scaled back to float32 in the same kernel.
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"

namespace kiln {

// Note [int8 quantization]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// kiln's int8 scheme is symmetric, so no zero points appear anywhere (what TF Lite's converter
// and oneDNN's int8 guide use for weights, and for activations whose range is one-sided):
//   - activations: q = saturate(round_half_even(float(x) * float(1 / scale))) per tensor, uint8
//     in [0, 255] for a tensor that is never negative (after relu), int8 in [-127, 127] otherwise
//     (-128 is never produced, so negation is exact);
//   - weights: int8 in [-127, 127] with one scale per output channel;
//   - bias: int32 in the accumulator's unit, bias_q[o] = round(bias[o] / (s_x * s_w[o]));
//   - output: y[o] = relu?((float(acc[o]) + float(bias_q[o])) * out_scale[o]) in float32, where
//     acc is the exact int32 sum of the integer products and out_scale[o] = s_x * s_w[o].
// The arithmetic is exact up to the last float32 multiply, so a quantized convolution equals a
// float64 reference of the same integers exactly (tests/ops/test_quantized_ops.cpp), provided
// the CPU has VNNI or AMX: without them oneDNN's int8 kernels halve the weights to avoid a
// 16-bit overflow (`vpmaddubsw`), and results differ from the exact ones in the last bits of
// the integer products.

// x (floating, any layout) quantized as above to dtype UInt8 or Int8, same shape and layout.
// NaN quantizes to 0. Not differentiable.
Tensor quantize_per_tensor(const Tensor& x, double scale, DType dtype,
                           const Loc& loc = Loc::current());

// x_q (uint8 or int8, [N, C, H, W]) convolved with weight_q (int8, [O, C / groups, kH, kW]),
// plus bias_q (int32 [O]), times out_scale (float32 [O]), then relu when `relu`: a float32
// [N, O, Ho, Wo] in channels-last layout. options.algorithm is ignored (oneDNN picks its int8
// kernel). Not differentiable.
Tensor quantized_conv2d(const Tensor& x_q, const Tensor& weight_q, const Tensor& bias_q,
                        const Tensor& out_scale, bool relu, const Conv2dOptions& options = {},
                        const Loc& loc = Loc::current());

// x_q (uint8 or int8, [..., K]) times weight_q^T (int8 [N, K]), plus bias_q (int32 [N]), times
// out_scale (float32 [N]), then relu when `relu`: float32 [..., N]. Not differentiable.
Tensor quantized_linear(const Tensor& x_q, const Tensor& weight_q, const Tensor& bias_q,
                        const Tensor& out_scale, bool relu, const Loc& loc = Loc::current());

}  // namespace kiln
