#pragma once
#include <cstdint>

namespace kiln {

// Note [autocast policy]: how an op runs inside an autocast region (kiln::autocast, autocast.h),
// declared in the op's own registration (OpSchema::autocast), never in a central list. Only
// float32 and 16-bit floating inputs are ever cast (float64 is left alone, as in PyTorch), and a
// cast is the public to_dtype op, so the tape differentiates through it and a tracer records it.
//   kLowPrecision  the compute-bound ops (matmul, linear, convolution): floating inputs are cast
//                  to the region's dtype; the kernel accumulates in float32. An op may name
//                  inputs that go to float32 instead (OpSchema::float32_inputs): conv2d_affine's
//                  folded batch-norm scale and shift, which are statistics, not operands of the
//                  product (Note [low-precision conv epilogue])
//   kFloat32       ops whose result 16 bits would spoil (reductions, softmax and log_softmax,
//                  losses, normalizations' statistics, exp/log/pow/rsqrt): 16-bit inputs are cast
//                  up to float32
//   kPromote       ops that take several floating operands of one dtype (add, cat, where): all
//                  are cast to the widest floating dtype among them
//   kKeep          ops exact or harmless in any dtype (views, shape ops, relu, pooling, padding,
//                  factories, state updates) and the gradients' own ops: run as called
// kUndeclared is what a registration that forgot says; the registry test fails on it, so a new
// op must choose.
enum class AutocastPolicy : uint8_t { kUndeclared, kLowPrecision, kFloat32, kPromote, kKeep };

const char* autocast_policy_name(AutocastPolicy policy);

}  // namespace kiln
