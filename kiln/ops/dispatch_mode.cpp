#include "kiln/ops/dispatch_mode.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>

#include "kiln/core/allocator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/dispatch_state.h"
#include "kiln/ops/dispatcher.h"

namespace kiln {

constinit thread_local detail::DispatchState detail::dispatch_tls;

namespace {

struct ProcessMode {
  int rank;
  std::shared_ptr<DispatchMode> mode;
};
using ProcessModes = std::vector<ProcessMode>;

// Copy-on-write: installing publishes a new list; readers load one pointer. Every list ever
// published stays alive in `published` (installs happen a few times per process), so a reader
// never sees freed memory, and the lists stay reachable (no leak report).
struct Published {
  std::vector<std::unique_ptr<const ProcessModes>> lists;
  std::atomic<const ProcessModes*> current{nullptr};
};
Published& published() {
  static auto* p = [] {
    auto* q = new Published();
    q->lists.push_back(std::make_unique<const ProcessModes>());
    q->current.store(q->lists.back().get());
    return q;
  }();
  return *p;
}
std::atomic<const ProcessModes*>& process_modes() {
  return published().current;
}

using detail::dispatch_tls;
using detail::DispatchState;

// Owns dispatch_tls.stack; touched only by a push, so ordinary dispatches skip its TLS init
// wrapper.
struct StackOwner {
  std::vector<std::shared_ptr<DispatchMode>> stack;
  StackOwner() { dispatch_tls.stack = &stack; }
  ~StackOwner() { dispatch_tls.stack = nullptr; }
};

struct EntryScope {
  explicit EntryScope(size_t level) : saved(dispatch_tls.entry) { dispatch_tls.entry = level; }
  ~EntryScope() { dispatch_tls.entry = saved; }
  size_t saved;
};

// Checks outputs for NaN/Inf while anomaly mode is on (DetectAnomalyGuard).
class AnomalyCheckMode final : public DispatchMode {
 public:
  const char* name() const override { return "anomaly"; }
  bool intercepts(const OpCall&) const override { return AnomalyMode::is_enabled(); }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    std::vector<Tensor> outputs = next(call);
    for (size_t i = 0; i < outputs.size(); ++i)
      if (has_nonfinite(outputs[i]))
        fail(call.op->name(), call.loc,
             "anomaly detected: output {} ({}) contains NaN or Inf; inputs were {}", i,
             outputs[i].describe(), [&] {
               std::string s;
               for (const Tensor& t : call.inputs) s += (s.empty() ? "" : ", ") + t.describe();
               return s;
             }());
    return outputs;
  }
};

const bool anomaly_installed =
    (install_process_mode(kAnomalyRank, std::make_shared<AnomalyCheckMode>()), true);

}  // namespace

// The order of one call: this thread's modes (top first), then the process-wide ones. Levels
// count every mode, interested or not, so that a mode's level (and dispatch_tls.entry inside its
// handle) does not depend on which modes a particular call interests.
struct DispatchChain {
  const std::vector<std::shared_ptr<DispatchMode>>* user;  // null when none was ever pushed
  size_t user_count;  // (*user)[0, user_count) at the time of the call
  const ProcessModes* process;

  DispatchMode* at(size_t level) const {
    return level < user_count ? (*user)[user_count - 1 - level].get()
                              : (*process)[level - user_count].mode.get();
  }
  std::vector<Tensor> run(const OpCall& call, size_t level) const {
    // A mode that is not interested in this call is skipped without a frame.
    for (const size_t size = user_count + process->size(); level < size; ++level) {
      DispatchMode* mode = at(level);
      if (!mode->intercepts(call)) continue;
      DispatchNext next(this, level + 1);
      EntryScope scope(level + 1);
      return mode->handle(call, next);
    }
    if (dispatch_tls.entry == 0) return detail::run_kernel(call);
    EntryScope kernel_scope(0);  // ops a kernel dispatches go through every mode
    return detail::run_kernel(call);
  }
};

std::vector<Tensor> DispatchNext::operator()(const OpCall& call) {
  return chain_->run(call, level_);
}

DispatchModeGuard::DispatchModeGuard(std::shared_ptr<DispatchMode> mode) : mode_(mode.get()) {
  KILN_INTERNAL_ASSERT(mode_ != nullptr, "DispatchModeGuard needs a mode");
  if (!dispatch_tls.stack) {
    thread_local StackOwner
        owner;  // constructed (and dispatch_tls.stack set) on this thread's first push
    KILN_INTERNAL_ASSERT(dispatch_tls.stack == &owner.stack,
                         "a dispatch mode pushed during thread exit");
  }
  dispatch_tls.stack->push_back(std::move(mode));
}

DispatchModeGuard::~DispatchModeGuard() {
  // Guards nest; a guard destroyed out of order is a bug in the code that made them.
  auto* stack = dispatch_tls.stack;
  if (stack && !stack->empty() && stack->back().get() == mode_) stack->pop_back();
}

std::vector<std::shared_ptr<DispatchMode>> dispatch_mode_stack() {
  return dispatch_tls.stack ? *dispatch_tls.stack : std::vector<std::shared_ptr<DispatchMode>>{};
}

void install_process_mode(int rank, std::shared_ptr<DispatchMode> mode) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto next = std::make_unique<ProcessModes>(*process_modes().load(std::memory_order_acquire));
  auto pos = std::upper_bound(next->begin(), next->end(), rank,
                              [](int r, const ProcessMode& m) { return r < m.rank; });
  next->insert(pos, {rank, std::move(mode)});
  const ProcessModes* raw = next.get();
  published().lists.push_back(std::move(next));
  process_modes().store(raw, std::memory_order_release);
}

namespace detail {

std::vector<Tensor> run_dispatch_modes(const OpCall& call) {
  return run_dispatch_modes(dispatch_tls, call);
}

std::vector<Tensor> run_dispatch_modes(DispatchState& state, const OpCall& call) {
  if (state.composite) return run_kernel(call);
  DispatchChain chain{state.stack, state.stack ? state.stack->size() : 0,
                      process_modes().load(std::memory_order_acquire)};
  return chain.run(call, state.entry);
}

std::vector<Tensor> run_kernel(const OpCall& call) {
  const Op& op = *call.op;
  std::vector<Tensor> outputs;
  // Ops without inputs (factories) say their device in their output metadata.
  // A meta input beside real ones (Note [tracing stand-ins]) makes it a meta run too.
  const bool meta = call.inputs.empty()
                        ? !call.metas.empty() && call.metas[0].device.is_meta()
                        : std::any_of(call.inputs.begin(), call.inputs.end(),
                                      [](const Tensor& t) { return t.defined() && t.is_meta(); });
  if (meta && !op.is_view()) {
    // A meta run writes nothing: an output that is a written input is that input.
    for (const TensorMeta& m : call.metas)
      outputs.push_back(m.alias_of >= 0 ? call.inputs[static_cast<size_t>(m.alias_of)]
                                        : empty(m.shape, {m.dtype, kMeta, false, m.memory_format}));
    return outputs;
  }
  struct KernelLocScope {
    KernelLocScope(DispatchState& state, const Loc* loc) : state(state), saved(state.kernel_loc) {
      state.kernel_loc = loc;
    }
    ~KernelLocScope() { state.kernel_loc = saved; }
    DispatchState& state;
    const Loc* saved;
  } loc_scope(dispatch_tls, &call.loc);
  try {
    return op.forward(call.inputs, call.metas);
  } catch (const OutOfMemoryError& e) {
    // The allocation happened inside the kernel; the user called this op at loc.
    throw OutOfMemoryError(error_message(op.name(), e.detail(), call.loc), e.detail());
  } catch (const Error&) {
    throw;
  } catch (const InternalError&) {
    throw;
  } catch (const std::bad_alloc&) {
    const std::string detail = "out of memory: a library the kernel uses could not allocate";
    throw OutOfMemoryError(error_message(op.name(), detail, call.loc), detail);
  } catch (const std::exception& e) {
    // Note [library exceptions]: a library's own exception (a dnnl::error, a std::length_error)
    // never reaches the user raw; a kernel that lets one escape has a bug, so it is reported as
    // an InternalError naming the op, the inputs and the line.
    std::string ins;
    for (const Tensor& t : call.inputs) ins += (ins.empty() ? "" : ", ") + t.describe();
    throw InternalError(error_message(
        op.name(),
        fmt::format("kiln internal error: the kernel raised '{}' for inputs {}", e.what(), ins),
        call.loc));
  }
}

CompositeScope::CompositeScope()
    : saved_(dispatch_tls.composite), grad_saved_(GradMode::is_enabled()) {
  dispatch_tls.composite = true;
  GradMode::set_enabled(false);
}

CompositeScope::~CompositeScope() {
  GradMode::set_enabled(grad_saved_);
  dispatch_tls.composite = saved_;
}

}  // namespace detail

const Loc& kernel_call_site() {
  static const Loc none = Loc::current();
  return dispatch_tls.kernel_loc ? *dispatch_tls.kernel_loc : none;
}

}  // namespace kiln
