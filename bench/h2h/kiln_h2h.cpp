// kiln's side of the head-to-head harness (bench/h2h/run.sh). Runs one group of workloads and
// prints one JSON object on stdout: {"side": "kiln", "group", "threads", "loadavg_before",
// "loadavg_after", "results": {name: {median_s, min_s, reps, inner, samples_s}}, "info": {...}}.
// Progress goes to stderr. The twins of every workload, under the same names, are in
// torch_h2h.py (PyTorch) and ort_h2h.js (ONNX Runtime); report.py joins the three.
//
//   kiln_h2h --group=micro|train|trainc|infer|compile|cnn|lowp [--quick] [--threads=2]
//            [--dir=DIR (infer: torch_h2h.py prepare's output)]
//            [--data=/usr/share/datasets/fashion-mnist (cnn)]
//
// Groups:
//   micro  dispatch_add (1-element add, no grad), sgemm_1024 (kiln::matmul) and
//          sgemm_1024_onednn (oneDNN's C dnnl_sgemm on the same operands), conv_fwd,
//          conv_bwd_data, conv_bwd_weight (3x3, 64->64 channels, 32x32, batch 64, padding 1),
//          mlp_step (784-256-10 MLP, cross entropy, SGD lr 0.01, batch 64), and the same step
//          compiled (mlp_step@compiled: train::compile_train_step)
//   train  resnet18_train_step (CIFAR ResNet-18, batch 128, Adam 1e-3) and the process's peak
//          resident memory (VmHWM) after it
//   trainc resnet18_train_step@compiled: the same step through compile_train_step, in a process
//          of its own (its peak RSS is the compiled step's)
//   infer  resnet18_infer_b1, resnet18_infer_b64 (eval mode, no grad) on the weights torch_h2h.py
//          exported, after checking kiln's logits against PyTorch's; the same compiled
//          (@compiled: traced once with a symbolic batch, frozen, every pass)
//   compile  compile time (trace + passes + first call) of the frozen ResNet-18 graph, then the
//          first-call time and latency at batch 1, 8, 32, 64, 128 (resnet18_latency_bN@compiled)
//   cnn    cnn_epoch: the small CNN over the 60000 Fashion-MNIST training images, batch 128,
//          Adam 1e-3 (--quick: 50 steps, extrapolated to an epoch), eager and compiled
//          (cnn_epoch@compiled)
//   lowp   float32 and bfloat16 matmul peaks, the convolution passes in bfloat16, the ResNet-18
//          training step under autocast(bfloat16) (kiln_h2h_lowp.cpp)
#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench/h2h/h2h_common.h"
#include "kiln/kiln.h"

namespace h2h {

using kiln::Tensor;
using nlohmann::json;

json run_micro(const Options& o) {
  json results = json::object();
  const Plan small{.warmup = 100, .reps = o.quick ? 5 : 9, .min_time = o.quick ? 0.05 : 0.2};
  const Plan dense{.warmup = 2, .reps = o.quick ? 3 : 7, .min_time = o.quick ? 0.05 : 0.2};

  {
    // Everything except the 1-element arithmetic is per-op overhead: infer, type promotion,
    // output allocation, kernel selection, dispatch bookkeeping.
    Tensor a = kiln::rand({1}), b = kiln::rand({1});
    results["dispatch_add"] = time_workload([&] { Tensor c = kiln::add(a, b); }, small).to_json();
    log("dispatch_add done");
  }
  {
    const int64_t n = 1024;
    Tensor a = kiln::rand({n, n}), b = kiln::rand({n, n});
    results["sgemm_1024"] = time_workload([&] { Tensor c = kiln::matmul(a, b); }, dense).to_json();
    std::vector<float> c(static_cast<size_t>(n * n));
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    bool ok = true;
    results["sgemm_1024_onednn"] = time_workload(
                                       [&] {
                                         ok &= dnnl_sgemm('N', 'N', n, n, n, 1.0f, pa, n, pb, n,
                                                          0.0f, c.data(), n) == dnnl_success;
                                       },
                                       dense)
                                       .to_json();
    if (!ok) throw std::runtime_error("dnnl_sgemm failed");
    log("sgemm done");
  }
  {
    const kiln::Conv2dOptions opts{.padding = 1};
    Tensor x = kiln::randn({64, 64, 32, 32}), w = kiln::mul(kiln::randn({64, 64, 3, 3}), 0.05);
    Tensor gy = kiln::randn({64, 64, 32, 32});
    results["conv_fwd"] =
        time_workload([&] { Tensor y = kiln::conv2d(x, w, Tensor(), opts); }, dense).to_json();
    results["conv_bwd_data"] = time_workload(
                                   [&] {
                                     Tensor gx = kiln::conv2d_backward_input(gy, w, {32, 32}, opts);
                                   },
                                   dense)
                                   .to_json();
    results["conv_bwd_weight"] =
        time_workload(
            [&] {
              Tensor gw = kiln::conv2d_backward_weight(x, gy, {3, 3}, opts);
            },
            dense)
            .to_json();
    log("conv done");
  }
  {
    auto model = kiln::nn::mlp(784, {256}, 10);
    kiln::optim::SGD opt(model->parameters(), {.lr = 0.01});
    Tensor x = kiln::rand({64, 1, 28, 28});
    Tensor y = kiln::randint(0, 10, {64});
    const Plan step{.warmup = 5, .reps = o.quick ? 5 : 9, .min_time = o.quick ? 0.05 : 0.2};
    results["mlp_step"] = time_workload(
                              [&] {
                                opt.zero_grad();
                                Tensor loss = kiln::cross_entropy((*model)(x), y);
                                loss.backward();
                                opt.step();
                              },
                              step)
                              .to_json();
    log("mlp_step done");
    // The same step compiled (Note [compiled training step]), on a twin model.
    auto twin = kiln::nn::mlp(784, {256}, 10);
    kiln::optim::SGD opt_c(twin->parameters(), {.lr = 0.01});
    kiln::train::CompiledStep compiled = kiln::train::compile_train_step(
        *twin, [](const Tensor& l, const Tensor& t) { return kiln::cross_entropy(l, t); }, opt_c);
    results["mlp_step@compiled"] = time_workload([&] { compiled(x, y); }, step).to_json();
    log("mlp_step@compiled done");
  }
  return {{"results", results}, {"info", json::object()}};
}

}  // namespace h2h

namespace {

[[noreturn]] void usage(const std::string& bad) {
  std::fprintf(
      stderr,
      "kiln_h2h: unknown or malformed argument '%s'\n"
      "usage: kiln_h2h --group=micro|train|trainc|infer|compile|cnn|lowp [--quick] [--threads=N] "
      "[--dir=DIR] [--data=DIR]\n",
      bad.c_str());
  std::exit(2);
}

h2h::Options parse(int argc, char** argv) {
  h2h::Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&](std::string_view key) -> const char* {
      if (!arg.starts_with(key) || arg.size() <= key.size()) return nullptr;
      return argv[i] + key.size();
    };
    if (const char* v = value("--group="))
      o.group = v;
    else if (const char* v = value("--threads="))
      o.threads = std::atoi(v);
    else if (const char* v = value("--dir="))
      o.dir = v;
    else if (const char* v = value("--data="))
      o.data = v;
    else if (arg == "--quick")
      o.quick = true;
    else
      usage(std::string(arg));
  }
  if (o.threads < 1) usage("--threads=" + std::to_string(o.threads));
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const h2h::Options o = parse(argc, argv);
  kiln::set_num_threads(o.threads);
  kiln::manual_seed(0);
  const std::string before = h2h::loadavg();
  nlohmann::json out;
  if (o.group == "micro")
    out = h2h::run_micro(o);
  else if (o.group == "train")
    out = h2h::run_train(o);
  else if (o.group == "infer")
    out = h2h::run_infer(o);
  else if (o.group == "cnn")
    out = h2h::run_cnn(o);
  else if (o.group == "trainc")
    out = h2h::run_train_compiled(o);
  else if (o.group == "compile")
    out = h2h::run_compile(o);
  else if (o.group == "lowp")
    out = h2h::run_lowp(o);
  else
    usage("--group=" + o.group);
  out["side"] = "kiln";
  out["group"] = o.group;
  out["quick"] = o.quick;
  out["threads"] = kiln::get_num_threads();
  out["loadavg_before"] = before;
  out["loadavg_after"] = h2h::loadavg();
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kiln_h2h: %s\n", e.what());
  return 1;
}
