#include "kiln/ops/dispatch_mode.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>

#include "kiln/core/allocator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/dispatcher.h"

namespace kiln {

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

thread_local std::vector<std::shared_ptr<DispatchMode>> tls_stack;
// Where a dispatch on this thread enters the order: 0 normally; inside a mode's handle(), the
// level below that mode, so a mode does not see the ops it dispatches itself.
thread_local size_t tls_entry = 0;

thread_local const Loc* tls_kernel_loc = nullptr;
// Inside a composite op's forward (Note [composite ops]).
thread_local bool tls_composite = false;

struct EntryScope {
  explicit EntryScope(size_t level) : saved(tls_entry) { tls_entry = level; }
  ~EntryScope() { tls_entry = saved; }
  size_t saved;
};

// Checks outputs for NaN/Inf while anomaly mode is on (DetectAnomalyGuard).
class AnomalyCheckMode final : public DispatchMode {
 public:
  const char* name() const override { return "anomaly"; }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    std::vector<Tensor> outputs = next(call);
    if (!AnomalyMode::is_enabled()) return outputs;
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

// The order of one call: this thread's modes (top first), then the process-wide ones.
struct DispatchChain {
  size_t user_count;  // tls_stack[0, user_count) at the time of the call
  const ProcessModes* process;

  size_t size() const { return user_count + process->size(); }
  DispatchMode* at(size_t level) const {
    return level < user_count ? tls_stack[user_count - 1 - level].get()
                              : (*process)[level - user_count].mode.get();
  }
  std::vector<Tensor> run(const OpCall& call, size_t level) const {
    if (level >= size()) {
      EntryScope kernel_scope(0);  // ops a kernel dispatches go through every mode
      return detail::run_kernel(call);
    }
    DispatchNext next(this, level + 1);
    EntryScope scope(level + 1);
    return at(level)->handle(call, next);
  }
};

std::vector<Tensor> DispatchNext::operator()(const OpCall& call) {
  return chain_->run(call, level_);
}

DispatchModeGuard::DispatchModeGuard(std::shared_ptr<DispatchMode> mode) : mode_(mode.get()) {
  KILN_INTERNAL_ASSERT(mode_ != nullptr, "DispatchModeGuard needs a mode");
  tls_stack.push_back(std::move(mode));
}

DispatchModeGuard::~DispatchModeGuard() {
  // Guards nest; a guard destroyed out of order is a bug in the code that made them.
  if (!tls_stack.empty() && tls_stack.back().get() == mode_) tls_stack.pop_back();
}

std::vector<std::shared_ptr<DispatchMode>> dispatch_mode_stack() {
  return tls_stack;
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
  if (tls_composite) return run_kernel(call);
  DispatchChain chain{tls_stack.size(), process_modes().load(std::memory_order_acquire)};
  return chain.run(call, tls_entry);
}

std::vector<Tensor> run_kernel(const OpCall& call) {
  const Op& op = *call.op;
  std::vector<Tensor> outputs;
  // Ops without inputs (factories) say their device in their output metadata.
  const bool meta = call.inputs.empty() ? !call.metas.empty() && call.metas[0].device.is_meta()
                                        : call.inputs[0].is_meta();
  if (meta && !op.is_view()) {
    // A meta run writes nothing: an output that is a written input is that input.
    for (const TensorMeta& m : call.metas)
      outputs.push_back(m.alias_of >= 0 ? call.inputs[static_cast<size_t>(m.alias_of)]
                                        : empty(m.shape, {m.dtype, kMeta, false, m.memory_format}));
    return outputs;
  }
  struct KernelLocScope {
    explicit KernelLocScope(const Loc* loc) : saved(tls_kernel_loc) { tls_kernel_loc = loc; }
    ~KernelLocScope() { tls_kernel_loc = saved; }
    const Loc* saved;
  } loc_scope(&call.loc);
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

CompositeScope::CompositeScope() : saved_(tls_composite), grad_saved_(GradMode::is_enabled()) {
  tls_composite = true;
  GradMode::set_enabled(false);
}

CompositeScope::~CompositeScope() {
  GradMode::set_enabled(grad_saved_);
  tls_composite = saved_;
}

}  // namespace detail

const Loc& kernel_call_site() {
  static const Loc none = Loc::current();
  return tls_kernel_loc ? *tls_kernel_loc : none;
}

}  // namespace kiln
