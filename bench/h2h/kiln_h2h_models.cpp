// kiln_h2h's model workloads: the ResNet-18 training step (and its peak memory), ResNet-18
// inference on PyTorch's weights, and the small CNN's Fashion-MNIST epoch. See kiln_h2h.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/h2h/h2h_common.h"
#include "bench/h2h/resnet_training.h"
#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"

namespace h2h {

using kiln::Tensor;
using nlohmann::json;

namespace {

// A spec with a symbolic first dim ("batch"), the others as in `shape`.
kiln::graph::TensorSpec batch_spec(const kiln::Shape& shape) {
  kiln::graph::SymShape dims = kiln::graph::static_shape(shape);
  dims[0].symbol = "batch";
  return kiln::graph::TensorSpec(dims, kiln::DType::Float32);
}

// The inference graph users deploy (Note [graph passes]): traced once with a symbolic batch,
// frozen (parameters and buffers are constants), every pass on.
kiln::graph::Function compiled_inference(const std::shared_ptr<kiln::nn::Module>& model,
                                         const kiln::Shape& example) {
  kiln::graph::FunctionOptions options;
  options.name = "resnet18";
  options.passes.freeze = true;
  return kiln::nn::function(model, {batch_spec(example)}, options);
}

double max_rel_err(const Tensor& got, const Tensor& want) {
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  if (g.size() != w.size()) return INFINITY;
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < w.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(g[i]) - w[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(w[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

double seconds_since(double t0) {
  return now_s() - t0;
}

}  // namespace

json run_train(const Options& o) {
  // The resident set before the model exists: the process with kiln loaded and nothing else.
  const double baseline_mib = proc_status_mib("VmRSS");
  ResNetTraining w;
  auto& [model, opt, x, y] = w;
  model->train();
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

// The same step through train::compile_train_step (Note [compiled training step]), in a process
// of its own so that its peak RSS is its own.
json run_train_compiled(const Options& o) {
  const double baseline_mib = proc_status_mib("VmRSS");
  ResNetTraining w;
  auto& [model, opt, x, y] = w;
  model->train();
  kiln::train::CompiledStep step = kiln::train::compile_train_step(
      *model, [](const Tensor& logits, const Tensor& t) { return kiln::cross_entropy(logits, t); },
      opt);
  double last_loss = 0.0;
  const double t0 = now_s();
  last_loss = step(x, y).loss.item();
  const double first_s = seconds_since(t0);
  const Plan plan{.warmup = 1, .reps = o.quick ? 3 : 5, .min_time = 0.0};
  json results = json::object();
  results["resnet18_train_step@compiled"] =
      time_workload([&] { last_loss = step(x, y).loss.item(); }, plan).to_json();
  log("resnet18_train_step@compiled done");
  const kiln::MemoryStats stats = kiln::memory_stats();
  json info = {{"rss_peak_mib", proc_status_mib("VmHWM")},
               {"rss_baseline_mib", baseline_mib},
               {"steps", 1 + plan.warmup + plan.reps},
               {"first_call_s", first_s},
               {"allocator_peak_allocated_mib",
                static_cast<double>(stats.peak_allocated_bytes) / (1024.0 * 1024.0)},
               {"last_loss", last_loss}};
  return {{"results", results}, {"info", info}};
}

// Quantizes `model` to int8 (train::quantize) on `calibration`, returning the largest logit
// difference on `x` from `want` relative to the largest logit.
double quantize_for_inference(kiln::nn::Module& model, const Tensor& calibration,
                              const Tensor& want, const Tensor& x) {
  auto ds = std::make_shared<kiln::data::TensorDataset>(
      calibration, kiln::zeros({calibration.size(0)}, {.dtype = kiln::DType::Int64}));
  kiln::data::DataLoader loader(ds, {.batch_size = calibration.size(0)});
  kiln::train::quantize(model, loader, {.calibration_samples = calibration.size(0)});
  return max_rel_err(model(x), want);
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
  // Compiled: one trace with a symbolic batch serves both sizes.
  kiln::graph::Function compiled = compiled_inference(model, x64.shape());
  const double compiled_rel = max_rel_err(compiled({x64})[0], want);
  log("compiled resnet18 logits vs PyTorch: " + std::to_string(compiled_rel));
  results["resnet18_infer_b1@compiled"] =
      time_workload([&] { Tensor y = compiled({x1})[0]; }, b1).to_json();
  results["resnet18_infer_b64@compiled"] =
      time_workload([&] { Tensor y = compiled({x64})[0]; }, b64).to_json();
  log("compiled resnet18 inference done (" + std::to_string(compiled.stats().traces) + " trace)");
  // The same model saved as a bundle and loaded (issue 39): what a deployed program runs.
  const std::string bundle_dir = o.dir + "/resnet18_bundle";
  kiln::io::save_model(*model, {batch_spec(x64.shape())}, bundle_dir);
  const kiln::io::SavedModel bundle = kiln::io::load_model(bundle_dir);
  const double bundle_rel = max_rel_err(bundle({x64})[0], want);
  log("bundle resnet18 logits vs PyTorch: " + std::to_string(bundle_rel));
  results["resnet18_infer_b1@bundle"] =
      time_workload([&] { Tensor y = bundle({x1})[0]; }, b1).to_json();
  results["resnet18_infer_b64@bundle"] =
      time_workload([&] { Tensor y = bundle({x64})[0]; }, b64).to_json();
  log("bundle resnet18 inference done");
  // bfloat16 (Note [low-precision conv epilogue]): the same frozen graph traced inside an
  // autocast region, so its convolutions run oneDNN's bfloat16 kernels with the batch norms folded
  // and the activations stay bfloat16; the logits come back float32.
  kiln::graph::FunctionOptions bf16_options;
  bf16_options.name = "resnet18_bf16";
  bf16_options.passes.freeze = true;
  kiln::graph::Function bf16 = kiln::graph::function(
      [&model](const std::vector<Tensor>& in) {
        kiln::AutocastGuard region(kiln::DType::BFloat16);
        return std::vector<Tensor>{(*model)(in[0]).to(kiln::DType::Float32)};
      },
      {batch_spec(x64.shape())}, bf16_options);
  const double bf16_rel = max_rel_err(bf16({x64})[0], want);
  log("bf16 resnet18 logits vs PyTorch float32: " + std::to_string(bf16_rel));
  results["resnet18_infer_b1@bf16"] =
      time_workload([&] { Tensor y = bf16({x1})[0]; }, b1).to_json();
  results["resnet18_infer_b64@bf16"] =
      time_workload([&] { Tensor y = bf16({x64})[0]; }, b64).to_json();
  log("bf16 resnet18 inference done");
  // int8 (Note [quantized layers]): calibrated on the first 32 images, as `kiln quantize` would
  // on training data; the logits' distance from float32 is reported beside the timings.
  const double int8_rel = quantize_for_inference(*model, x64.narrow(0, 0, 32), want, x64);
  log("int8 resnet18 logits vs PyTorch float32: " + std::to_string(int8_rel));
  results["resnet18_infer_b1@int8"] = time_workload([&] { Tensor y = (*model)(x1); }, b1).to_json();
  results["resnet18_infer_b64@int8"] =
      time_workload([&] { Tensor y = (*model)(x64); }, b64).to_json();
  log("int8 resnet18 inference done");
  json info = {{"logits_max_rel_err", rel},
               {"int8_logits_max_rel_err", int8_rel},
               {"bf16_logits_max_rel_err", bf16_rel},
               {"native_bf16", kiln::has_native_low_precision(kiln::DType::BFloat16)},
               {"onednn_isa", kiln::onednn_cpu_isa()},
               {"logits_max_abs_err", max_diff},
               {"compiled_logits_max_rel_err", compiled_rel},
               {"compiled_traces", compiled.stats().traces},
               {"bundle_logits_max_rel_err", bundle_rel}};
  return {{"results", results}, {"info", info}};
}

// Compile time and latency by batch size (ResNet-18 inference): one compile with a symbolic batch
// serves every size; the first call at each size shows that nothing is traced again.
json run_compile(const Options& o) {
  if (o.dir.empty()) throw std::runtime_error("--group=compile needs --dir (torch_h2h.py prepare)");
  auto model = kiln::nn::resnet18(3, 10);
  model->load_state_dict(kiln::io::load_safetensors(o.dir + "/weights.safetensors").tensors);
  model->eval();
  kiln::NoGradGuard no_grad;
  json results = json::object(), info = json::object();
  const double t0 = now_s();
  kiln::graph::Function compiled = compiled_inference(model, {1, 3, 32, 32});
  Tensor first = compiled({kiln::randn({1, 3, 32, 32})})[0];
  info["compile_s"] = seconds_since(t0);  // trace + passes + the first call, at batch 1
  for (int64_t b : {1, 8, 32, 64, 128}) {
    Tensor x = kiln::randn({b, 3, 32, 32});
    const double f0 = now_s();
    Tensor y = compiled({x})[0];
    info["first_call_s_b" + std::to_string(b)] = seconds_since(f0);
    const Plan plan{.warmup = 1, .reps = o.quick ? 3 : 5, .min_time = o.quick ? 0.05 : 0.2};
    results["resnet18_latency_b" + std::to_string(b) + "@compiled"] =
        time_workload([&] { Tensor z = compiled({x})[0]; }, plan).to_json();
    log("batch " + std::to_string(b) + " done");
  }
  info["traces"] = compiled.stats().traces;
  return {{"results", results}, {"info", info}};
}

namespace {

struct CnnResult {
  json timing;
  double mean_loss = 0.0;
};

// Epochs of the small CNN over the training images, each batch given to train_batch (which
// returns its loss). Batches are shuffled index_selects from the in-memory tensors on both sides:
// the figure is training compute plus batching, not a data loader (bench/compare_loader.sh
// measures that).
template <class TrainBatch>
CnnResult cnn_epochs(const Options& o, const Tensor& images, const Tensor& labels,
                     TrainBatch&& train_batch) {
  const int64_t n = images.size(0), batch = 128;
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
    loss_sum += train_batch(kiln::index_select(images, 0, idx), kiln::index_select(labels, 0, idx));
    ++loss_count;
  };
  const int warmup_steps = 5;
  CnnResult r;
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
    r.timing = j;
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
    r.timing = time_workload(run_epoch, Plan{.warmup = 0, .reps = 3, .min_time = 0.0}).to_json();
  }
  r.mean_loss = loss_count ? loss_sum / static_cast<double>(loss_count) : 0.0;
  return r;
}

}  // namespace

json run_cnn(const Options& o) {
  auto ds = kiln::data::fashion_mnist(o.data, "train");
  const Tensor images = ds->data();  // float32 [60000, 1, 28, 28] in [0, 1]
  const Tensor labels = ds->target();
  json results = json::object(), info = json::object();
  // Eager, then compiled (Note [compiled training step]), then eager under bfloat16 autocast (as
  // `kiln train --precision bf16` runs), each on a fresh model and optimizer.
  for (const std::string mode : {"eager", "compiled", "bf16"}) {
    const bool compile = mode == "compiled";
    const std::string key = mode == "eager" ? "cnn_epoch" : "cnn_epoch@" + mode;
    auto model = kiln::nn::small_cnn(1, 10, 28);
    model->train();
    kiln::optim::Adam opt(model->parameters(), {.lr = 1e-3});
    auto ce = [](const Tensor& l, const Tensor& t) { return kiln::cross_entropy(l, t); };
    std::optional<kiln::train::CompiledStep> compiled;
    if (compile) compiled.emplace(kiln::train::compile_train_step(*model, ce, opt));
    const CnnResult r = cnn_epochs(o, images, labels, [&](const Tensor& xb, const Tensor& yb) {
      if (compiled) return (*compiled)(xb, yb).loss.item();
      opt.zero_grad();
      Tensor loss;
      {
        std::optional<kiln::AutocastGuard> region;
        if (mode == "bf16") region.emplace(kiln::DType::BFloat16);
        loss = ce((*model)(xb), yb);
      }
      loss.backward();
      opt.step();
      return loss.item();
    });
    results[key] = r.timing;
    info[mode == "eager" ? "mean_loss_last_epoch_or_steps" : "mean_loss_" + mode] = r.mean_loss;
    log(key + " done");
  }
  return {{"results", results}, {"info", info}};
}

}  // namespace h2h
