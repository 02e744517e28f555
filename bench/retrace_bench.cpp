// Retraces of a compiled training step over an epoch whose batch size varies (issue 38): for
// each loss, how many traces one run of batches makes and what the first (tracing) call costs
// against a warm one. A loss whose backward bakes a size traces once per batch size (Note
// [compiled training step] falls back to per-shape traces); a size-free one traces once.
//
//   build/release/bench/kiln_retrace_bench [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/models.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

struct LossCase {
  const char* name;
  bool class_targets;  // int64 labels (cross-entropy) rather than float targets like the logits
  train::StepLossFn fn;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  manual_seed(0);
  const std::vector<LossCase> cases = {
      {"mse", false, [](const Tensor& y, const Tensor& t) { return mse_loss(y, t); }},
      {"l1", false, [](const Tensor& y, const Tensor& t) { return l1_loss(y, t); }},
      {"huber", false, [](const Tensor& y, const Tensor& t) { return huber_loss(y, t); }},
      {"bce_with_logits", false,
       [](const Tensor& y, const Tensor& t) { return binary_cross_entropy_with_logits(y, t); }},
      {"cross_entropy", true, [](const Tensor& y, const Tensor& t) { return cross_entropy(y, t); }},
  };
  // An epoch of 64-batches with a short last one, then the sizes issue 38 names.
  const std::vector<int64_t> batches = {64, 64, 64, 37, 1, 7, 64, 256};
  std::string sizes;
  for (int64_t b : batches) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  std::printf("kiln_retrace_bench: mlp 784-64-10, SGD, batches %s; warm = median of %d calls\n",
              sizes.c_str(), reps);
  std::printf("%-16s %7s %14s %12s\n", "loss", "traces", "first call ms", "warm b64 ms");
  for (const LossCase& c : cases) {
    auto model = nn::mlp(784, {64}, 10);
    model->train();
    optim::SGD sgd(model->parameters(), {.lr = 0.01});
    train::CompiledStep step =
        train::compile_train_step(*model, c.fn, sgd, {.logger = [](const std::string&) {}});
    auto target_of = [&](int64_t b) {
      return c.class_targets ? randint(0, 10, {b}) : rand({b, 10});
    };
    double first = 0;
    for (size_t i = 0; i < batches.size(); ++i) {
      const int64_t b = batches[i];
      Tensor x = randn({b, 784}), t = target_of(b);
      const auto t0 = Clock::now();
      step(x, t);
      if (i == 0) first = seconds_since(t0);
    }
    std::vector<double> warm;
    Tensor x = randn({64, 784}), t = target_of(64);
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      step(x, t);
      warm.push_back(seconds_since(t0));
    }
    std::sort(warm.begin(), warm.end());
    std::printf("%-16s %7d %14.2f %12.3f\n", c.name, step.function()->stats().traces, first * 1e3,
                warm[warm.size() / 2] * 1e3);
  }
  return 0;
}
