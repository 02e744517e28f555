// kiln_h2h's model workloads: the ResNet-18 training step (and its peak memory), ResNet-18
// inference on PyTorch's weights, and the small CNN's Fashion-MNIST epoch. See kiln_h2h.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/h2h/h2h_common.h"
#include "kiln/kiln.h"

namespace h2h {

using kiln::Tensor;
using nlohmann::json;

json run_train(const Options& o) {
  // The resident set before the model exists: the process with kiln loaded and nothing else.
  const double baseline_mib = proc_status_mib("VmRSS");
  auto model = kiln::nn::resnet18(3, 10);
  model->train();
  kiln::optim::Adam opt(model->parameters(), {.lr = 1e-3});
  Tensor x = kiln::randn({128, 3, 32, 32});
  Tensor y = kiln::randint(0, 10, {128});
  double last_loss = 0.0;
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = kiln::cross_entropy((*model)(x), y);
    loss.backward();
    opt.step();
    last_loss = loss.item();
  };
  const Plan plan{.warmup = 1, .reps = o.quick ? 3 : 5, .min_time = 0.0};
  json results = json::object();
  results["resnet18_train_step"] = time_workload(step, plan).to_json();
  log("resnet18_train_step done");
  const kiln::MemoryStats stats = kiln::memory_stats();
  json info = {{"rss_peak_mib", proc_status_mib("VmHWM")},
               {"rss_baseline_mib", baseline_mib},
               {"steps", plan.warmup + plan.reps},
               {"allocator_peak_reserved_mib",
                static_cast<double>(stats.peak_reserved_bytes) / (1024.0 * 1024.0)},
               {"allocator_peak_allocated_mib",
                static_cast<double>(stats.peak_allocated_bytes) / (1024.0 * 1024.0)},
               {"last_loss", last_loss}};
  return {{"results", results}, {"info", info}};
}

json run_infer(const Options& o) {
  if (o.dir.empty()) throw std::runtime_error("--group=infer needs --dir (torch_h2h.py prepare)");
  auto model = kiln::nn::resnet18(3, 10);
  model->load_state_dict(kiln::io::load_safetensors(o.dir + "/weights.safetensors").tensors);
  model->eval();
  const kiln::io::SafetensorsFile inputs =
      kiln::io::load_safetensors(o.dir + "/inputs.safetensors");
  const Tensor& x64 = inputs.at("x64");
  const Tensor& want = inputs.at("logits64");
  kiln::NoGradGuard no_grad;

  // Correctness guard: the same weights and images must give PyTorch's logits.
  Tensor got = (*model)(x64);
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(g[i]) - w[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(w[i])));
  }
  const double rel = g.size() == w.size() ? max_diff / std::max(max_ref, 1e-30) : INFINITY;
  log("resnet18 logits vs PyTorch: max |diff| / max |ref| = " + std::to_string(rel));

  Tensor x1 = x64.narrow(0, 0, 1).contiguous();
  json results = json::object();
  const Plan b1{.warmup = 3, .reps = o.quick ? 5 : 9, .min_time = o.quick ? 0.05 : 0.2};
  results["resnet18_infer_b1"] = time_workload([&] { Tensor y = (*model)(x1); }, b1).to_json();
  log("resnet18_infer_b1 done");
  const Plan b64{.warmup = 1, .reps = o.quick ? 3 : 7, .min_time = 0.0};
  results["resnet18_infer_b64"] = time_workload([&] { Tensor y = (*model)(x64); }, b64).to_json();
  log("resnet18_infer_b64 done");
  json info = {{"logits_max_rel_err", rel}, {"logits_max_abs_err", max_diff}};
  return {{"results", results}, {"info", info}};
}

json run_cnn(const Options& o) {
  auto ds = kiln::data::fashion_mnist(o.data, "train");
  const Tensor images = ds->data();  // float32 [60000, 1, 28, 28] in [0, 1]
  const Tensor labels = ds->target();
  const int64_t n = images.size(0), batch = 128;
  auto model = kiln::nn::small_cnn(1, 10, 28);
  model->train();
  kiln::optim::Adam opt(model->parameters(), {.lr = 1e-3});

  // Batches are shuffled index_selects from the in-memory tensors on both sides: the figure is
  // training compute plus batching, not a data loader (bench/compare_loader.sh measures that).
  std::vector<int64_t> order;
  int64_t epoch = 0, pos = n;
  double loss_sum = 0.0;
  int64_t loss_count = 0;
  auto step = [&] {
    if (pos >= n) {
      order = kiln::data::shuffled_indices(n, 0, static_cast<uint64_t>(epoch++));
      pos = 0;
    }
    const int64_t len = std::min(batch, n - pos);
    Tensor idx =
        kiln::tensor<int64_t>(std::vector<int64_t>(order.begin() + pos, order.begin() + pos + len));
    pos += len;
    opt.zero_grad();
    Tensor loss = kiln::cross_entropy((*model)(kiln::index_select(images, 0, idx)),
                                      kiln::index_select(labels, 0, idx));
    loss.backward();
    opt.step();
    loss_sum += loss.item();
    ++loss_count;
  };
  const int warmup_steps = 5;
  json results = json::object(), info = json::object();
  if (o.quick) {
    const int steps = 50;
    Timing t = time_workload(step, Plan{.warmup = warmup_steps, .reps = steps, .min_time = 0.0});
    // An epoch is n / batch steps' worth of images (the last batch is partial).
    const double scale = static_cast<double>(n) / static_cast<double>(batch);
    json j = t.to_json();
    j["median_s"] = t.median * scale;
    j["min_s"] = t.min * scale;
    j["cpu_median_s"] = j["cpu_median_s"].get<double>() * scale;
    j["extrapolated_from_steps"] = steps;
    j["step_median_s"] = t.median;
    results["cnn_epoch"] = j;
  } else {
    for (int i = 0; i < warmup_steps; ++i) step();
    auto run_epoch = [&] {
      pos = n;  // start a fresh shuffled epoch
      loss_sum = 0.0;
      loss_count = 0;
      while (true) {
        step();
        if (pos >= n) break;
      }
    };
    results["cnn_epoch"] =
        time_workload(run_epoch, Plan{.warmup = 0, .reps = 3, .min_time = 0.0}).to_json();
  }
  info["mean_loss_last_epoch_or_steps"] = loss_count ? loss_sum / loss_count : 0.0;
  log("cnn_epoch done");
  return {{"results", results}, {"info", info}};
}

}  // namespace h2h
