// LibTorch's side of the head-to-head harness (bench/h2h/run.sh): the C++ API a C++ user would
// pick instead of kiln (Debian's libtorch-dev, PyTorch 1.13), on the twins of kiln_h2h's workloads
// under the same names. Prints one JSON object on stdout in kiln_h2h's format, with "side":
// "libtorch"; progress on stderr. Built by run.sh as a project of its own (this folder), so that
// kiln's build never needs LibTorch. Run it as run.sh does, with the PyTorch processes' BLAS
// (OpenBLAS through LD_LIBRARY_PATH: Debian's default libblas.so.3 is the reference BLAS).
//
//   libtorch_h2h --group=micro|train|infer [--quick] [--threads=2]
//
//   micro  dispatch_add (1-element add, no grad), mlp_step (784-256-10 MLP, cross entropy, SGD
//          lr 0.01, batch 64)
//   train  resnet18_train_step (CIFAR ResNet-18, batch 128, Adam 1e-3) and the peak RSS after it
//   infer  resnet18_infer_b1, resnet18_infer_b64 (eval mode, NoGradGuard; random weights: the
//          time does not depend on their values)
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "bench/h2h/h2h_common.h"

namespace {

using nlohmann::json;
namespace nn = torch::nn;

void log(const std::string& msg) {
  std::fprintf(stderr, "libtorch_h2h: %s\n", msg.c_str());
  std::fflush(stderr);
}

// The CIFAR ResNet-18 of torch_h2h.py and kiln/nn/models.h.
struct BlockImpl : nn::Module {
  BlockImpl(int64_t in, int64_t planes, int64_t stride)
      : conv1(nn::Conv2dOptions(in, planes, 3).stride(stride).padding(1).bias(false)),
        bn1(planes),
        conv2(nn::Conv2dOptions(planes, planes, 3).padding(1).bias(false)),
        bn2(planes) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != planes) {
      shortcut =
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, planes, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(planes));
      register_module("shortcut", shortcut);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = torch::relu(bn1(conv1(x)));
    out = bn2(conv2(out));
    return torch::relu(out + (shortcut.is_empty() ? x : shortcut->forward(x)));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(Block);

struct ResNetImpl : nn::Module {
  ResNetImpl()
      : conv1(nn::Conv2dOptions(3, 64, 3).padding(1).bias(false)), bn1(64), linear(512, 10) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    int64_t in = 64;
    const int64_t planes[] = {64, 128, 256, 512};
    for (int s = 0; s < 4; ++s)
      for (int b = 0; b < 2; ++b) {
        blocks.push_back(register_module("block" + std::to_string(s) + std::to_string(b),
                                         Block(in, planes[s], b == 0 && s > 0 ? 2 : 1)));
        in = planes[s];
      }
    register_module("linear", linear);
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = torch::relu(bn1(conv1(x)));
    for (Block& b : blocks) out = b->forward(out);
    out = torch::flatten(torch::adaptive_avg_pool2d(out, {1, 1}), 1);
    return linear(out);
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  std::vector<Block> blocks;
  nn::Linear linear;
};
TORCH_MODULE(ResNet);

json micro(const h2h::Options& o) {
  json res = json::object();
  const h2h::Plan small{.warmup = 100, .reps = o.quick ? 5 : 9, .min_time = o.quick ? 0.05 : 0.2};
  {
    torch::NoGradGuard no_grad;
    torch::Tensor a = torch::rand({1}), b = torch::rand({1});
    res["dispatch_add"] =
        h2h::time_workload([&] { torch::Tensor c = torch::add(a, b); }, small).to_json();
    log("dispatch_add done");
  }
  nn::Sequential mlp(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
  torch::optim::SGD opt(mlp->parameters(), torch::optim::SGDOptions(0.01));
  torch::Tensor x = torch::rand({64, 1, 28, 28}), y = torch::randint(0, 10, {64});
  const h2h::Plan step{.warmup = 5, .reps = o.quick ? 5 : 9, .min_time = o.quick ? 0.05 : 0.2};
  res["mlp_step"] = h2h::time_workload(
                        [&] {
                          opt.zero_grad();
                          torch::Tensor loss =
                              torch::nn::functional::cross_entropy(mlp->forward(x), y);
                          loss.backward();
                          opt.step();
                        },
                        step)
                        .to_json();
  log("mlp_step done");
  return {{"results", res}, {"info", json::object()}};
}

json train(const h2h::Options& o) {
  const double baseline = h2h::proc_status_mib("VmRSS");
  ResNet model;
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::Tensor x = torch::randn({128, 3, 32, 32}), y = torch::randint(0, 10, {128});
  double last = 0;
  const h2h::Plan plan{.warmup = 1, .reps = o.quick ? 3 : 5};
  json res = {{"resnet18_train_step", h2h::time_workload(
                                          [&] {
                                            opt.zero_grad();
                                            torch::Tensor loss =
                                                torch::nn::functional::cross_entropy(
                                                    model->forward(x), y);
                                            loss.backward();
                                            opt.step();
                                            last = loss.item<double>();
                                          },
                                          plan)
                                          .to_json()}};
  log("resnet18_train_step done");
  return {{"results", res},
          {"info",
           {{"rss_peak_mib", h2h::proc_status_mib("VmHWM")},
            {"rss_baseline_mib", baseline},
            {"steps", plan.warmup + plan.reps},
            {"last_loss", last}}}};
}

json infer(const h2h::Options& o) {
  ResNet model;
  model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor x64 = torch::randn({64, 3, 32, 32});
  torch::Tensor x1 = x64.slice(0, 0, 1).contiguous();
  json res = json::object();
  res["resnet18_infer_b1"] =
      h2h::time_workload([&] { model->forward(x1); },
                         {.warmup = 3, .reps = o.quick ? 5 : 9, .min_time = o.quick ? 0.05 : 0.2})
          .to_json();
  log("resnet18_infer_b1 done");
  res["resnet18_infer_b64"] =
      h2h::time_workload([&] { model->forward(x64); }, {.warmup = 1, .reps = o.quick ? 3 : 7})
          .to_json();
  log("resnet18_infer_b64 done");
  return {{"results", res}, {"info", json::object()}};
}

[[noreturn]] void usage(const std::string& bad) {
  std::fprintf(stderr,
               "libtorch_h2h: unknown or malformed argument '%s'\n"
               "usage: libtorch_h2h --group=micro|train|infer [--quick] [--threads=N]\n",
               bad.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) try {
  h2h::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--group="))
      o.group = std::string(arg.substr(8));
    else if (arg.starts_with("--threads="))
      o.threads = std::atoi(argv[i] + 10);
    else if (arg == "--quick")
      o.quick = true;
    else if (!arg.starts_with("--dir=") && !arg.starts_with("--data="))
      usage(std::string(arg));
  }
  if (o.threads < 1) usage("--threads=" + std::to_string(o.threads));
  torch::set_num_threads(o.threads);
  torch::set_num_interop_threads(1);
  torch::manual_seed(0);
  const std::string before = h2h::loadavg();
  json out;
  if (o.group == "micro")
    out = micro(o);
  else if (o.group == "train")
    out = train(o);
  else if (o.group == "infer")
    out = infer(o);
  else
    usage("--group=" + o.group);
  out["side"] = "libtorch";
  out["group"] = o.group;
  out["quick"] = o.quick;
  out["threads"] = torch::get_num_threads();
  out["version"] = TORCH_VERSION;
  out["loadavg_before"] = before;
  out["loadavg_after"] = h2h::loadavg();
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "libtorch_h2h: %s\n", e.what());
  return 1;
}
