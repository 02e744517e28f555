#pragma once
#include <optional>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/autocast_policy.h"
#include "kiln/ops/op.h"

namespace kiln {

// Note [autocast]
// ~~~~~~~~~~~~~~~
// Mixed precision the way torch.autocast("cpu", dtype=torch.bfloat16) does it: inside a region,
// each op's inputs are cast as its declared policy says (Note [autocast policy]) before the op is
// inferred and dispatched, so
//   - parameters stay float32 (the master weights); the matmuls and convolutions read bfloat16
//     copies of them, and the gradients flow back through the casts into float32 .grad;
//   - a cast of a leaf tensor that requires grad (a parameter) is made once per region and reused
//     while the tensor is unchanged (its version), so a weight read by several ops or time steps
//     is converted once; the cache is dropped when the outermost region ends and when a backward
//     pass starts (the cached casts' graph is freed by it);
//   - the casts are ordinary to_dtype ops, seen by every dispatch mode: the tape records them and
//     a tracer captures them, so a graph traced inside a region runs its casts with no autocast
//     around it;
//   - ops that kiln runs internally (a composite op's parts, a backward pass's vjps) are not cast
//     again.
//
// Low precision pays only where the CPU has native 16-bit kernels (oneDNN's AVX512-BF16 or AMX
// for bfloat16; oneDNN 2.6 has no CPU float16 kernels at all): elsewhere the same kernels convert
// to float32 and back, which is several times slower than float32 alone. There a region warns
// once and leaves everything in float32, unless AutocastOptions::force is set (which keeps the
// 16-bit semantics, for tests and for checking a model's numerics on any machine).
struct AutocastOptions {
  // false makes a region that turns autocast off inside an enclosing one.
  bool enabled = true;
  // Run in the low precision even where the CPU has no native kernels for it.
  bool force = false;
  // Cache the casts of parameters (leaf tensors that require grad) for the region's lifetime.
  bool cache = true;
};

class [[nodiscard]] AutocastGuard {
 public:
  // dtype: bfloat16 or float16.
  explicit AutocastGuard(DType dtype, AutocastOptions options = {},
                         const Loc& loc = Loc::current());
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  // Whether ops are cast in this region (false when disabled, or when float32 was kept for lack
  // of native kernels).
  bool active() const;
  DType dtype() const { return dtype_; }

 private:
  DType dtype_;
  void* saved_;  // the enclosing region (detail::AutocastRegion*)
  void* region_;
};

// `auto guard = kiln::autocast(DType::BFloat16);` casts as above until `guard` goes out of scope.
inline AutocastGuard autocast(DType dtype, AutocastOptions options = {},
                              const Loc& loc = Loc::current()) {
  return AutocastGuard(dtype, options, loc);
}

// The low-precision dtype of this thread's active region, or nullopt.
std::optional<DType> autocast_dtype();

// Whether this CPU runs dtype's matmuls and convolutions natively, as the backend reports it
// (bfloat16: oneDNN's avx512_core_bf16 or AMX kernels). KILN_NATIVE_LOW_PRECISION=0/1 overrides
// the answer (read on every call), so tests can take either branch on any CPU.
bool has_native_low_precision(DType dtype);

// The policy op declares in its registration (Note [autocast policy]).
AutocastPolicy autocast_policy(const Op& op);

namespace detail {
struct AutocastRegion;

// The backend's answer to has_native_low_precision (registered at load time; ops cannot include
// backends).
void set_native_low_precision_query(bool (*query)(DType));

// The inputs `op` runs on in `region`, or nullopt when no input changes. Called by dispatch().
std::optional<std::vector<Tensor>> autocast_inputs(AutocastRegion& region, const Op& op,
                                                   const std::vector<Tensor>& inputs,
                                                   const Loc& loc);

// The inputs an op registered as `op_name` runs on in this thread's region (the inputs themselves
// outside one): for a functional wrapper that checks its inputs with the op's infer before it
// dispatches, so that it checks what dispatch will pass (conv2d_affine).
std::vector<Tensor> autocast_inputs_for(const char* op_name, const std::vector<Tensor>& inputs,
                                        const Loc& loc);

// Suspends this thread's region for a scope (the backward pass: its vjps run as recorded), and
// drops the region's cached casts.
class AutocastSuspend {
 public:
  AutocastSuspend();
  ~AutocastSuspend();
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  AutocastRegion* saved_;
};
}  // namespace detail

}  // namespace kiln
