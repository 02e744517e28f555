// kiln_profile: where one step of a harness workload spends its time. Runs warm-up steps, then
// times `--steps` steps under a Profiler and prints the median step time and the per-op table.
//   kiln_profile --workload cnn-train|resnet18-train|resnet18-infer|mlp-train [--batch N]
//                [--steps N] [--warmup N] [--threads N] [--channels-last]
// Inputs are random (the shapes are the harness's), so it needs no data files.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <vector>

#include "kiln/kiln.h"

namespace {

using kiln::Tensor;

struct Workload {
  std::shared_ptr<kiln::nn::Module> model;
  kiln::Shape input;
  bool train = true;
};

Workload make(const std::string& name, int64_t batch) {
  if (name == "cnn-train") return {kiln::nn::small_cnn(1, 10, 28), {batch, 1, 28, 28}};
  if (name == "resnet18-train") return {kiln::nn::resnet18(3, 10), {batch, 3, 32, 32}};
  if (name == "resnet18-infer") return {kiln::nn::resnet18(3, 10), {batch, 3, 32, 32}, false};
  if (name == "mlp-train") return {kiln::nn::mlp(784, {256}, 10), {batch, 784}};
  throw kiln::Error("unknown workload '" + name + "'");
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Profile one step of a kiln workload"};
  std::string workload = "cnn-train";
  int64_t batch = 128;
  int steps = 20, warmup = 3, threads = 2;
  std::string weights;
  bool channels_last = false;
  app.add_option("--workload", workload, "cnn-train, resnet18-train, resnet18-infer, mlp-train");
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "profiled steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "unprofiled steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "intra-op threads")->check(CLI::PositiveNumber);
  app.add_option("--weights", weights, "a safetensors state dict to load (e.g. the harness's)");
  app.add_flag("--channels-last", channels_last,
               "feed the input channels-last (NHWC strides), as PyTorch's "
               "memory_format=torch.channels_last");
  CLI11_PARSE(app, argc, argv);
  kiln::set_num_threads(threads);
  kiln::manual_seed(0);

  Workload w = make(workload, batch);
  if (!weights.empty()) w.model->load_state_dict(kiln::io::load_safetensors(weights).tensors);
  Tensor x = kiln::randn(w.input);
  if (channels_last) x = kiln::contiguous(x, kiln::MemoryFormat::kChannelsLast);
  Tensor y = kiln::randint(0, 10, {batch});
  kiln::optim::Adam opt(w.model->parameters(), {.lr = 1e-3});
  w.model->train(w.train);
  std::function<void()> step = [&] {
    if (!w.train) {
      kiln::NoGradGuard no_grad;
      Tensor out = (*w.model)(x);
      return;
    }
    opt.zero_grad();
    Tensor loss = kiln::cross_entropy((*w.model)(x), y);
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> ms;
  kiln::Profiler profiler;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  profiler.stop();
  std::sort(ms.begin(), ms.end());
  std::printf("%s batch %lld, %d threads: median %.3f ms/step (min %.3f, max %.3f) over %d steps\n",
              workload.c_str(), static_cast<long long>(batch), threads, ms[ms.size() / 2],
              ms.front(), ms.back(), steps);
  std::printf("%s", profiler.table(30).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kiln_profile: %s\n", e.what());
  return 1;
}
