#pragma once
#include <vector>

#include "kiln/ops/op.h"

namespace kiln {

// Runs an op: checks devices, runs infer, then passes the call through the dispatch modes (the
// tape, anomaly checks, the profiler, a tracer: Note [dispatch modes]) to the kernel, which does
// not run on meta tensors.
std::vector<Tensor> dispatch(const OpPtr& op, const std::vector<Tensor>& inputs, const Loc& loc);
Tensor dispatch1(const OpPtr& op, const std::vector<Tensor>& inputs, const Loc& loc);

template <class O, class... Args>
Tensor call_op(const std::vector<Tensor>& inputs, const Loc& loc, Args&&... attrs) {
  return dispatch1(std::make_shared<const O>(std::forward<Args>(attrs)...), inputs, loc);
}

// Whether any input requires grad and grad mode is on (the dispatcher's own test).
bool should_record(const Op& op, const std::vector<Tensor>& inputs);

// The call site of the op whose kernel runs on this thread, for value errors a kernel finds (an
// index out of range). Kernels take no location so that an op's state is only its attributes;
// outside a kernel this is a location in the dispatcher.
const Loc& kernel_call_site();

namespace detail {
// Note [tracing stand-ins]: while a tracer records this thread's ops (kiln/graph/tracer.h), the
// user's code mixes meta tensors (the trace's inputs and results) with real ones (parameters the
// tracer has not replaced yet); the device check then accepts a meta tensor beside a cpu one,
// and the tracer hands the kernel step only meta stand-ins. Scopes nest.
// Whether a and b may meet in one op: the same device, or (while tracing) meta beside cpu.
bool devices_compatible(const Tensor& a, const Tensor& b);

class MixedMetaScope {
 public:
  MixedMetaScope();
  ~MixedMetaScope();
  MixedMetaScope(const MixedMetaScope&) = delete;
  MixedMetaScope& operator=(const MixedMetaScope&) = delete;
};
}  // namespace detail

// NaN/Inf check used by anomaly mode (forward here, backward in the engine).
bool has_nonfinite(const Tensor& t);

}  // namespace kiln
