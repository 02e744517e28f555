#include "kiln/ops/dispatcher.h"

#include <cmath>
#include <new>

#include "kiln/core/allocator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/profiler.h"

namespace kiln {

namespace {
TapeRecorder recorder = nullptr;
DispatchObserver observer;

// Note [stale views]: a view records its base's history when it is made. If the base is later
// modified in place while gradients are recorded, the base gets a new grad_fn but the view keeps
// the old one, and its gradient would be silently wrong (PyTorch regenerates the view's history;
// kiln does not yet), so using such a view with grad mode on is an error.
void check_stale_view(const Op& op, const Tensor& t, size_t i, const Loc& loc) {
  const TensorImpl& impl = *t.impl();
  if (!impl.is_view_ || impl.view_history_version_ == t.storage()->history_version()) return;
  if (!t.requires_grad() || !GradMode::is_enabled()) return;
  const Storage& s = *t.storage();
  fail(op.name(), loc,
       "input {} ({}) is a view whose base was modified in place by '{}' at {} after the view "
       "was made, so its gradient would be wrong; make the view again after the in-place op",
       i, t.describe(), s.last_writer_op(), format_location(s.last_writer_loc()));
}

void check_devices(const Op& op, const std::vector<Tensor>& inputs, const Loc& loc) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      fail(op.name(), loc, "expected a defined tensor as input {}, but got an undefined one", i);
    if (i > 0 && inputs[i].device() != inputs[0].device())
      fail(op.name(), loc,
           "expected all tensors on the same device, but got input 0 {} and input {} {}",
           inputs[0].describe(), i, inputs[i].describe());
    check_stale_view(op, inputs[i], i, loc);
  }
}
}  // namespace

void set_tape_recorder(TapeRecorder r) {
  recorder = r;
}
void set_dispatch_observer(DispatchObserver o) {
  observer = std::move(o);
}

bool should_record(const Op& op, const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled() || !op.differentiable()) return false;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) return true;
  return false;
}

bool has_nonfinite(const Tensor& t) {
  if (t.is_meta() || !is_floating(t.dtype())) return false;
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return true;
  return false;
}

std::vector<Tensor> dispatch(const OpPtr& op, const std::vector<Tensor>& inputs, const Loc& loc) {
  check_devices(*op, inputs, loc);
  std::vector<TensorMeta> metas = op->infer(inputs, loc);
  // An output size computed from user arguments (pad, repeat, interpolate) must be countable.
  for (const TensorMeta& m : metas) shape_numel(m.shape, op->name(), loc);
  if (observer) observer(*op);
  bool meta = !inputs.empty() && inputs[0].is_meta();
  std::vector<Tensor> outputs;
  if (meta) {
    for (const TensorMeta& m : metas)
      outputs.push_back(empty(m.shape, {m.dtype, kMeta, false, m.memory_format}));
  } else {
    try {
      if (detail::profiling_active()) {
        detail::OpTimer timer(op->name());
        outputs = op->forward(inputs, metas);
        timer.set_flops(op->flops(inputs, outputs));
      } else {
        outputs = op->forward(inputs, metas);
      }
    } catch (const OutOfMemoryError& e) {
      // The allocation happened inside the kernel; the user called this op at loc.
      throw OutOfMemoryError(error_message(op->name(), e.detail(), loc), e.detail());
    } catch (const Error&) {
      throw;
    } catch (const InternalError&) {
      throw;
    } catch (const std::bad_alloc&) {
      const std::string detail = "out of memory: a library the kernel uses could not allocate";
      throw OutOfMemoryError(error_message(op->name(), detail, loc), detail);
    } catch (const std::exception& e) {
      // Note [library exceptions]: a library's own exception (a dnnl::error, a std::length_error)
      // never reaches the user raw; a kernel that lets one escape has a bug, so it is reported as
      // an InternalError naming the op, the inputs and the line.
      std::string ins;
      for (const Tensor& t : inputs) ins += (ins.empty() ? "" : ", ") + t.describe();
      throw InternalError(error_message(
          op->name(),
          fmt::format("kiln internal error: the kernel raised '{}' for inputs {}", e.what(), ins),
          loc));
    }
  }
  if (AnomalyMode::is_enabled()) {
    for (size_t i = 0; i < outputs.size(); ++i)
      if (has_nonfinite(outputs[i]))
        fail(op->name(), loc,
             "anomaly detected: output {} ({}) contains NaN or Inf; inputs were {}", i,
             outputs[i].describe(), [&] {
               std::string s;
               for (const Tensor& t : inputs) s += (s.empty() ? "" : ", ") + t.describe();
               return s;
             }());
  }
  if (recorder && should_record(*op, inputs)) recorder(op, inputs, outputs, loc);
  return outputs;
}

Tensor dispatch1(const OpPtr& op, const std::vector<Tensor>& inputs, const Loc& loc) {
  std::vector<Tensor> out = dispatch(op, inputs, loc);
  KILN_INTERNAL_ASSERT(out.size() == 1, std::string(op->name()) + " must have one output");
  return out[0];
}

}  // namespace kiln
