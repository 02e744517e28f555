#include "kiln/ops/dispatcher.h"

#include <cmath>

#include "kiln/core/allocator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/dispatch_state.h"

namespace kiln {

namespace {
// Note [stale views]: a view records its base's history when it is made. If the base is later
// modified in place while gradients are recorded, the base gets a new grad_fn but the view keeps
// the old one, and its gradient would be silently wrong (PyTorch regenerates the view's history;
// kiln does not yet), so using such a view with grad mode on is an error.
void check_stale_view(const Op& op, const Tensor& t, size_t i, const Loc& loc) {
  const TensorImpl& impl = *t.impl();
  if (!impl.is_view_ || impl.view_history_version_ == t.storage()->history_version()) return;
  // Only a gradient could be wrong: an op without one (detach, a comparison) may read the view.
  if (!t.requires_grad() || !GradMode::is_enabled() || !op.differentiable()) return;
  const Storage& s = *t.storage();
  fail(op.name(), loc,
       "input {} ({}) is a view whose base was modified in place by '{}' at {} after the view "
       "was made, so its gradient would be wrong; make the view again after the in-place op",
       i, t.describe(), s.last_writer_op(), format_location(s.last_writer_loc()));
}

thread_local int mixed_meta_depth = 0;  // Note [tracing stand-ins]

void check_devices(const Op& op, const std::vector<Tensor>& inputs, const Loc& loc) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      fail(op.name(), loc, "expected a defined tensor as input {}, but got an undefined one", i);
    if (i > 0 && !detail::devices_compatible(inputs[i], inputs[0]))
      fail(op.name(), loc,
           "expected all tensors on the same device, but got input 0 {} and input {} {}",
           inputs[0].describe(), i, inputs[i].describe());
    check_stale_view(op, inputs[i], i, loc);
  }
}
}  // namespace

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

namespace {
std::vector<Tensor> dispatch_as_given(detail::DispatchState& state, const OpPtr& op,
                                      const std::vector<Tensor>& inputs, const Loc& loc) {
  std::vector<TensorMeta> metas = op->infer(inputs, loc);
  // An output size computed from user arguments (pad, repeat, interpolate) must be countable.
  for (const TensorMeta& m : metas) shape_numel(m.shape, op->name(), loc);
  return detail::run_dispatch_modes(state, OpCall{op, inputs, metas, loc});
}
}  // namespace

std::vector<Tensor> dispatch(const OpPtr& op, const std::vector<Tensor>& inputs, const Loc& loc) {
  check_devices(*op, inputs, loc);
  detail::DispatchState& state = detail::dispatch_tls;
  // Note [autocast]: the inputs are cast before infer, so the op is checked, recorded and traced
  // with the dtypes it runs in. Ops inside a composite op are its implementation, not cast again.
  if (state.autocast && !state.composite) [[unlikely]] {
    if (std::optional<std::vector<Tensor>> cast =
            detail::autocast_inputs(*state.autocast, *op, inputs, loc))
      return dispatch_as_given(state, op, *cast, loc);
  }
  return dispatch_as_given(state, op, inputs, loc);
}

bool detail::devices_compatible(const Tensor& a, const Tensor& b) {
  if (a.device() == b.device()) return true;
  return mixed_meta_depth > 0 && (a.is_meta() || b.is_meta());
}

detail::MixedMetaScope::MixedMetaScope() {
  ++mixed_meta_depth;
}
detail::MixedMetaScope::~MixedMetaScope() {
  --mixed_meta_depth;
}

Tensor dispatch1(const OpPtr& op, const std::vector<Tensor>& inputs, const Loc& loc) {
  std::vector<Tensor> out = dispatch(op, inputs, loc);
  KILN_INTERNAL_ASSERT(out.size() == 1, std::string(op->name()) + " must have one output");
  return out[0];
}

}  // namespace kiln
