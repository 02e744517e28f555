#pragma once
// The per-device kernel table (Note [kernel table]).
#include <string>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln {

// Note [kernel table]
// ~~~~~~~~~~~~~~~~~~~
// An op's definition (kiln/ops/: name, attrs, infer, vjp) does not say how it computes. Kernels
// live in a backend folder (kiln/backend/cpu/, ...) and register themselves here under the op's
// name and a device type; Op::kernel() looks the op up by (name, device of its outputs) and calls
// the kernel with the op and the tensors. A kernel reads the op's attributes through the
// family's header in kiln/ops/ (norm_ops.h, pool_ops.h, conv_ops.h, ...: a plain struct per op
// and an accessor), so the op classes stay private to their definition files. So a new device, or
// a graph executor that picks kernels itself, adds or reads entries without editing any op.
// Op::kernel() is not virtual: no definition can carry a kernel of its own. An op overrides
// forward() only to be a view (no kernel), a composite (Note [composite ops]) or a write into an
// input (Note [effects]), whose forward still reaches its kernel through the table.
//
// The table holds kernels only, never a forward(): a kernel writes into the outputs the
// dispatcher allocated from infer's metadata (shape, dtype, layout). Where a backend keeps an
// output in a layout of its own (oneDNN's blocked nChw8c, Note [blocked activations]), it does so
// inside that output's storage (Note [deferred contents]), so no op needs to allocate its outputs
// itself and no copy or allocation is added. Where a definition needs an answer only the backend
// can give (a convolution's output layout, which epilogue fuses), the family header declares a
// small query that the backend registers beside its kernels (Note [conv planner] in
// conv_ops.h). A check that needs values (an index out of range) runs in the kernel, but the
// definition owns its error text: the family header declares the check and the definition
// implements it (indexing_ops.h, pad_ops.h, pool_ops.h, loss_ops.h).
//
// Where the kernels are: the convolution family and bmm in kiln/backend/onednn/ (with the float64
// loops they fall back on in kiln/backend/cpu/); every other family in kiln/backend/cpu/, one
// <family>_ops.cpp per definition file (unary_ops.cpp for unary.cpp, ...), including the
// optimizers' fused updates (optimizer_update_ops.cpp, defined in kiln/ops/optimizer_update.cpp).
using KernelFn = void (*)(const Op& op, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor>& outputs);

// At load time, from a backend file (KILN_REGISTER_KERNEL); two kernels for one (op, device) are
// an internal error.
bool register_kernel(const char* op_name, DeviceType device, KernelFn fn);
// nullptr when the op has no kernel on that device.
KernelFn find_kernel(const Op& op, DeviceType device);
// The op names with a kernel on `device`, sorted.
std::vector<std::string> ops_with_kernels(DeviceType device);

#define KILN_REGISTER_KERNEL(op_name, device, fn)                           \
  static const bool KILN_KERNEL_CONCAT(kiln_kernel_registered_, __LINE__) = \
      ::kiln::register_kernel(op_name, device, fn)
#define KILN_KERNEL_CONCAT_INNER(a, b) a##b
#define KILN_KERNEL_CONCAT(a, b) KILN_KERNEL_CONCAT_INNER(a, b)

}  // namespace kiln
