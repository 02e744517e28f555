#pragma once
// The float64 convolution loops (Note [conv reference loops] in conv_reference.cpp): the forward
// and both gradients on dense [N, C, H, W] / [O, C / groups, kH, kW] buffers, in a fixed
// summation order, so that their results are the same for every thread count.
#include "kiln/ops/conv_geometry.h"

namespace kiln {
namespace detail {

void ref_forward(const ConvGeometry& g, const double* x, const double* w, const double* b,
                 double* y);
void ref_backward_data(const ConvGeometry& g, const double* gy, const double* w, double* gx);
void ref_backward_weights(const ConvGeometry& g, const double* x, const double* gy, double* gw);

}  // namespace detail
}  // namespace kiln
