#pragma once
// Shared by kiln_h2h's two sources: the run plan of a workload, the timing loop (the same
// algorithm as time_workload in torch_h2h.py and ort_h2h.mjs, so the three sides are measured
// alike) and the process's resident-memory readings.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h2h {

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// How one workload is run: `warmup` untimed calls, then `reps` timed repetitions of `inner`
// calls each, `inner` chosen so that one repetition lasts at least `min_time` seconds (1 when
// min_time is 0 or one call already takes that long).
struct Plan {
  int warmup = 1;
  int reps = 5;
  double min_time = 0.0;
};

// Per-call wall-clock seconds of every repetition, their median and minimum, and the median of
// the process's CPU seconds per call (all threads; on a loaded machine wall time inflates with
// the waiting, CPU time less so).
struct Timing {
  std::vector<double> per_call;
  std::vector<double> cpu_per_call;
  int64_t inner = 1;
  double median = 0.0;
  double min = 0.0;

  nlohmann::json to_json() const {
    return {{"median_s", median},      {"min_s", min},
            {"reps", per_call.size()}, {"inner", inner},
            {"samples_s", per_call},   {"cpu_median_s", median_of(cpu_per_call)}};
  }
};

inline double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double now_s() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

template <class F>
double run_for(F& fn, int64_t iters) {
  double start = now_s();
  for (int64_t i = 0; i < iters; ++i) fn();
  return now_s() - start;
}

template <class F>
Timing time_workload(F&& fn, const Plan& plan) {
  double last = 0.0;
  for (int i = 0; i < plan.warmup; ++i) last = run_for(fn, 1);
  Timing t;
  if (plan.min_time > 0.0 && last < plan.min_time) {
    // Calibration as in Google Benchmark / torch_ops.py: grow the count until one run is long
    // enough, aiming 40% past the target, at most 10x per step.
    double elapsed = 0.0;
    while (true) {
      elapsed = run_for(fn, t.inner);
      if (elapsed >= plan.min_time) break;
      double grow = std::min(10.0, 1.4 * plan.min_time / std::max(elapsed, 1e-9));
      t.inner = std::max(t.inner + 1, static_cast<int64_t>(static_cast<double>(t.inner) * grow));
    }
  }
  for (int r = 0; r < plan.reps; ++r) {
    const double cpu0 = cpu_s();
    t.per_call.push_back(run_for(fn, t.inner) / static_cast<double>(t.inner));
    t.cpu_per_call.push_back((cpu_s() - cpu0) / static_cast<double>(t.inner));
  }
  t.median = median_of(t.per_call);
  t.min = *std::min_element(t.per_call.begin(), t.per_call.end());
  return t;
}

// A field of /proc/self/status in MiB ("VmHWM": peak resident set, "VmRSS": current); -1 when
// the file or the field is missing.
inline double proc_status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    long long kib = 0;
    if (std::sscanf(line.c_str() + field.size() + 1, "%lld", &kib) == 1)
      return static_cast<double>(kib) / 1024.0;
  }
  return -1.0;
}

inline std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Command-line options of kiln_h2h (see kiln_h2h.cpp).
struct Options {
  std::string group;
  bool quick = false;
  int threads = 2;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string dir;  // torch_h2h.py prepare's output: weights.safetensors, inputs.safetensors
};

// The workload groups; each returns {"results": {name: timing}, "info": {...}}. Each group runs
// in its own process (run.sh), so peak memory and allocator caches do not leak between them.
nlohmann::json run_micro(const Options& o);  // kiln_h2h.cpp
nlohmann::json run_train(const Options& o);  // kiln_h2h_models.cpp
nlohmann::json run_train_compiled(const Options& o);
nlohmann::json run_infer(const Options& o);
nlohmann::json run_compile(const Options& o);
nlohmann::json run_cnn(const Options& o);
nlohmann::json run_lowp(const Options& o);  // kiln_h2h_lowp.cpp

inline void log(const std::string& msg) {
  std::fprintf(stderr, "kiln_h2h: %s\n", msg.c_str());
  std::fflush(stderr);
}

}  // namespace h2h
