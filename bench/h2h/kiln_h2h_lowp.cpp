// kiln_h2h --group=lowp: reduced precision (issue 17). The matmul peaks of this machine in
// float32 and bfloat16 (the largest GFLOP/s of kiln::matmul over square sizes) and int8 (of
// kiln::quantized_linear, GOP/s), the 3x3
// convolution's three passes in bfloat16, and the ResNet-18 training step (CIFAR, batch 128,
// Adam 1e-3) in float32 and under kiln::autocast(bfloat16). The info block names the ISA oneDNN
// dispatches to, which decides whether bfloat16 is native (AVX512-BF16, AMX) or converted.
// Autocast is forced (AutocastOptions::force), so on a CPU without native bfloat16 the rows show
// what bfloat16 costs there rather than falling back to float32. Which oneDNN kernel runs each
// pass: ONEDNN_VERBOSE=1 kiln_h2h --group=lowp --quick (its "exec" lines name the implementation).
#include <optional>

#include "bench/h2h/h2h_common.h"
#include "bench/h2h/resnet_training.h"
#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/kiln.h"

namespace h2h {

using kiln::DType;
using kiln::Tensor;
using nlohmann::json;

namespace {

// GFLOP/s of an n^3 product from a median time.
double gemm_gflops(int64_t n, double seconds) {
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / seconds /
         1e9;
}

}  // namespace

json run_lowp(const Options& o) {
  json results = json::object();
  json info = json::object();
  info["onednn_isa"] = kiln::onednn_cpu_isa();
  info["native_bf16"] = kiln::has_native_low_precision(DType::BFloat16);
  const Plan dense{.warmup = 2, .reps = o.quick ? 3 : 7, .min_time = o.quick ? 0.05 : 0.2};
  // The peaks: the best of a few square sizes.
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    double best = 0.0;
    for (int64_t n : {1024, 2048}) {
      if (o.quick && n > 1024) continue;
      Tensor a = kiln::rand({n, n}).to(dt), b = kiln::rand({n, n}).to(dt);
      const std::string name =
          std::string(dt == DType::Float32 ? "lp_sgemm_" : "lp_bf16gemm_") + std::to_string(n);
      const Timing t = time_workload([&] { Tensor c = kiln::matmul(a, b); }, dense);
      results[name] = t.to_json();
      best = std::max(best, gemm_gflops(n, t.median));
    }
    info[dt == DType::Float32 ? "peak_f32_gflops" : "peak_bf16_gflops"] = best;
  }
  {
    // The int8 peak (Note [int8 quantization]): uint8 activations times int8 weights, int32
    // accumulation and bias, float32 output, as a quantized linear layer runs; [n, n] x [n, n]^T.
    double best = 0.0;
    for (int64_t n : {1024, 2048}) {
      if (o.quick && n > 1024) continue;
      Tensor a = kiln::quantize_per_tensor(kiln::rand({n, n}), 1.0 / 255.0, DType::UInt8);
      Tensor b =
          kiln::quantize_per_tensor(kiln::sub(kiln::rand({n, n}), 0.5), 0.5 / 127.0, DType::Int8);
      Tensor bias = kiln::zeros({n}, {.dtype = DType::Int32});
      Tensor scale = kiln::full({n}, 1e-4);
      const Timing t = time_workload(
          [&] { Tensor c = kiln::quantized_linear(a, b, bias, scale, false); }, dense);
      results["lp_int8gemm_" + std::to_string(n)] = t.to_json();
      best = std::max(best, gemm_gflops(n, t.median));
    }
    info["peak_int8_gops"] = best;
    info["onednn_exact_int8"] = kiln::onednn_exact_int8();
  }
  log("gemm peaks done");
  {
    const kiln::Conv2dOptions opts{.padding = 1};
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const std::string suffix = dt == DType::Float32 ? "_f32" : "_bf16";
      Tensor x = kiln::randn({64, 64, 32, 32}).to(dt);
      Tensor w = kiln::mul(kiln::randn({64, 64, 3, 3}), 0.05).to(dt);
      Tensor gy = kiln::randn({64, 64, 32, 32}).to(dt);
      results["lp_conv_fwd" + suffix] =
          time_workload([&] { Tensor y = kiln::conv2d(x, w, Tensor(), opts); }, dense).to_json();
      results["lp_conv_bwd_data" + suffix] =
          time_workload(
              [&] {
                Tensor gx = kiln::conv2d_backward_input(gy, w, {32, 32}, opts);
              },
              dense)
              .to_json();
      results["lp_conv_bwd_weight" + suffix] =
          time_workload(
              [&] {
                Tensor gw = kiln::conv2d_backward_weight(x, gy, {3, 3}, opts);
              },
              dense)
              .to_json();
    }
    info["conv_flops"] = 2.0 * 64 * 64 * 32 * 32 * 64 * 9;
    log("conv done");
  }
  for (bool low : {false, true}) {
    kiln::manual_seed(0);
    ResNetTraining w;
    auto& [model, opt, x, y] = w;
    model->train();
    double last_loss = 0.0;
    kiln::AutocastOptions forced;
    forced.force = true;
    auto step = [&] {
      opt.zero_grad();
      Tensor loss;
      {
        std::optional<kiln::AutocastGuard> region;
        if (low) region.emplace(DType::BFloat16, forced);
        loss = kiln::cross_entropy((*model)(x), y);
      }
      loss.backward();
      opt.step();
      last_loss = loss.item();
    };
    const Plan plan{.warmup = 1, .reps = o.quick ? 2 : 5, .min_time = 0.0};
    const std::string name = low ? "lp_resnet18_train_step_bf16" : "lp_resnet18_train_step_f32";
    results[name] = time_workload(step, plan).to_json();
    info[name + "_last_loss"] = last_loss;
    log(name + " done");
  }
  return {{"results", results}, {"info", info}};
}

}  // namespace h2h
