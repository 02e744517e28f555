#include "kiln/ops/profiler.h"

#include "kiln/ops/dispatch_mode.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>

namespace kiln {

struct Profiler::State {
  std::mutex mutex;
  std::map<std::string, OpProfile> ops;
  bool active = true;
};

namespace {

std::atomic<int> active_count{0};
std::mutex sessions_mutex;
std::vector<std::shared_ptr<Profiler::State>>& sessions() {
  static auto* s = new std::vector<std::shared_ptr<Profiler::State>>();
  return *s;
}

// Nanoseconds spent in ops nested inside the op this thread is running.
thread_local int64_t child_ns = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record(const char* name, int64_t self_ns, int64_t total_ns, double flops) {
  std::lock_guard<std::mutex> lock(sessions_mutex);
  for (const auto& s : sessions()) {
    std::lock_guard<std::mutex> op_lock(s->mutex);
    OpProfile& p = s->ops[name];
    if (p.name.empty()) p.name = name;
    ++p.calls;
    p.self_ms += static_cast<double>(self_ns) * 1e-6;
    p.total_ms += static_cast<double>(total_ns) * 1e-6;
    p.flops += flops;
  }
}

// KILN_PROFILE=1: one profiler for the whole process, printed at exit.
struct EnvProfiler {
  std::unique_ptr<Profiler> profiler;
  EnvProfiler() {
    const char* v = std::getenv("KILN_PROFILE");
    if (v != nullptr && std::string(v) != "0" && std::string(v) != "") {
      profiler = std::make_unique<Profiler>();
    }
  }
  ~EnvProfiler() {
    if (profiler) std::cerr << "\nKILN_PROFILE: ops of the whole run\n" << profiler->table(40);
  }
};
EnvProfiler env_profiler;

}  // namespace

Profiler::Profiler() : state_(std::make_shared<State>()) {
  std::lock_guard<std::mutex> lock(sessions_mutex);
  sessions().push_back(state_);
  active_count.fetch_add(1, std::memory_order_relaxed);
}

Profiler::~Profiler() {
  stop();
}

void Profiler::stop() {
  std::lock_guard<std::mutex> lock(sessions_mutex);
  if (!state_->active) return;
  state_->active = false;
  auto& s = sessions();
  s.erase(std::remove(s.begin(), s.end(), state_), s.end());
  active_count.fetch_sub(1, std::memory_order_relaxed);
}

void Profiler::reset() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->ops.clear();
}

std::vector<OpProfile> Profiler::key_averages() const {
  std::vector<OpProfile> out;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (const auto& [name, p] : state_->ops) out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const OpProfile& a, const OpProfile& b) {
    return a.self_ms != b.self_ms ? a.self_ms > b.self_ms : a.name < b.name;
  });
  return out;
}

std::string Profiler::table(size_t max_rows) const {
  const std::vector<OpProfile> ops = key_averages();
  double self_total = 0.0;
  int64_t calls = 0;
  for (const auto& p : ops) self_total += p.self_ms, calls += p.calls;
  std::string s = fmt::format("{:<28} {:>8} {:>11} {:>7} {:>11} {:>9}\n", "op", "calls", "self ms",
                              "share", "total ms", "GFLOP/s");
  for (size_t i = 0; i < ops.size() && i < max_rows; ++i) {
    const OpProfile& p = ops[i];
    const std::string gflops =
        p.flops > 0 && p.self_ms > 0 ? fmt::format("{:.1f}", p.flops / (p.self_ms * 1e6)) : "";
    s += fmt::format("{:<28} {:>8} {:>11.3f} {:>6.1f}% {:>11.3f} {:>9}\n", p.name, p.calls,
                     p.self_ms, self_total > 0 ? 100.0 * p.self_ms / self_total : 0.0, p.total_ms,
                     gflops);
  }
  if (ops.size() > max_rows) s += fmt::format("... {} more ops\n", ops.size() - max_rows);
  s += fmt::format("{:<28} {:>8} {:>11.3f}\n", "total", calls, self_total);
  return s;
}

namespace {

bool profiling_active() {
  return active_count.load(std::memory_order_relaxed) > 0;
}

// Times one op's kernel (RAII, so a kernel that throws still closes its time).
class OpTimer {
 public:
  explicit OpTimer(const char* name) : name_(name), start_ns_(now_ns()), child_ns_saved_(child_ns) {
    child_ns = 0;
  }
  ~OpTimer() {
    const int64_t total = now_ns() - start_ns_;
    const int64_t self = total - child_ns;
    child_ns = child_ns_saved_ + total;
    record(name_, self, total, flops_);
  }
  void set_flops(double flops) { flops_ = flops; }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* name_;
  int64_t start_ns_;
  int64_t child_ns_saved_;
  double flops_ = 0.0;
};

class ProfileMode final : public DispatchMode {
 public:
  const char* name() const override { return "profiler"; }
  bool intercepts(const OpCall& call) const override {
    if (!profiling_active()) return false;
    const bool meta = call.inputs.empty() ? !call.metas.empty() && call.metas[0].device.is_meta()
                                          : call.inputs[0].is_meta();
    return !meta;
  }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    OpTimer timer(call.op->name());
    std::vector<Tensor> outputs = next(call);
    timer.set_flops(call.op->flops(call.inputs, outputs));
    return outputs;
  }
};

const bool profile_installed =
    (install_process_mode(kProfileRank, std::make_shared<ProfileMode>()), true);

}  // namespace
}  // namespace kiln
