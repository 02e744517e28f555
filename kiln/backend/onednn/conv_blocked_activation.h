#pragma once
// Blocked-activation deferral (Note [blocked activations] in conv_blocked_activation.cpp): an
// inference convolution's output kept in oneDNN's blocked layout until other code reads its
// memory, and the next convolution taking that blocked form directly.
#include "kiln/backend/onednn/conv_primitives.h"

namespace kiln {
namespace detail {

// The blocked form of t in layout `chosen`, when t's storage holds one not yet written out and t
// is the whole of it, read as `plain`; else an undefined Tensor.
Tensor pending_blocked(const Tensor& t, const dnnl::memory::desc& plain,
                       const dnnl::memory::desc& chosen);

// Leaves out's storage holding `blocked`, its contents in operand out_op's chosen layout, to be
// written out in the plain layout when someone reads the memory.
void defer_blocked_output(const Tensor& out, Tensor blocked, const Operand& out_op);

}  // namespace detail
}  // namespace kiln
