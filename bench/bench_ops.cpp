// kiln micro-benchmarks: eager dispatch overhead, a tiny autograd step, elementwise and reduction
// bandwidth, matmul throughput against oneDNN's own sgemm, and one MLP training step. Every
// workload has a twin in bench/torch_ops.py with the same name; bench/compare_torch.sh joins them.
//
// Threads: kiln's default (kiln::get_num_threads()), overridden by KILN_BENCH_THREADS or
// --threads=N. All timings are wall-clock (UseRealTime) because the large ops run on several
// threads, whose CPU time the main thread's clock would not see.
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/kiln.h"

namespace {

using kiln::Tensor;

constexpr int64_t kLarge = int64_t{4} << 20;  // 4M float32 elements = 16 MiB per tensor

// A float32 leaf with values in [-1, 1).
Tensor uniform(kiln::Shape shape, bool requires_grad = false) {
  Tensor t = kiln::sub(kiln::mul(kiln::rand(std::move(shape)), 2.0), 1.0).detach();
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

// --- dispatch overhead ---------------------------------------------------------------------------

// One add of two 1-element tensors: everything except the arithmetic is per-op overhead (infer,
// type promotion, allocation, kernel selection, dispatch bookkeeping).
void BM_AddScalarNoGrad(benchmark::State& state) {
  Tensor a = uniform({1}), b = uniform({1});
  for (auto _ : state) {
    Tensor c = kiln::add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
}
BENCHMARK(BM_AddScalarNoGrad)->UseRealTime();

// The same add with one input requiring grad: adds building the tape node (and freeing it when
// the output dies at the end of the iteration).
void BM_AddScalarWithGrad(benchmark::State& state) {
  Tensor a = uniform({1}, true), b = uniform({1});
  for (auto _ : state) {
    Tensor c = kiln::add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
}
BENCHMARK(BM_AddScalarWithGrad)->UseRealTime();

// y = sum(tanh(x * w + b)) on 4 elements, then backward into w and b: a tape of four nodes, so
// this is almost pure autograd-engine overhead.
void BM_TinyForwardBackward(benchmark::State& state) {
  Tensor x = uniform({4});
  Tensor w = uniform({4}, true), b = uniform({4}, true);
  for (auto _ : state) {
    Tensor y = kiln::sum(kiln::tanh(kiln::add(kiln::mul(x, w), b)));
    y.backward();
    benchmark::DoNotOptimize(w.grad().impl());
    w.set_grad(Tensor());
    b.set_grad(Tensor());
  }
}
BENCHMARK(BM_TinyForwardBackward)->UseRealTime();

// --- memory-bound elementwise and reductions ----------------------------------------------------

void BM_AddLarge(benchmark::State& state) {
  Tensor a = uniform({kLarge}), b = uniform({kLarge});
  for (auto _ : state) {
    Tensor c = kiln::add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * 3 * kLarge * int64_t{sizeof(float)});
}
BENCHMARK(BM_AddLarge)->UseRealTime();

void BM_MulLarge(benchmark::State& state) {
  Tensor a = uniform({kLarge}), b = uniform({kLarge});
  for (auto _ : state) {
    Tensor c = kiln::mul(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * 3 * kLarge * int64_t{sizeof(float)});
}
BENCHMARK(BM_MulLarge)->UseRealTime();

void BM_ExpLarge(benchmark::State& state) {
  Tensor a = uniform({kLarge});
  for (auto _ : state) {
    Tensor c = kiln::exp(a);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kLarge * int64_t{sizeof(float)});
}
BENCHMARK(BM_ExpLarge)->UseRealTime();

// Transcendental functions (SLEEF, Note [vectorized math]): compute-bound where exp is not.
void BM_TanhLarge(benchmark::State& state) {
  Tensor a = uniform({kLarge});
  for (auto _ : state) {
    Tensor c = kiln::tanh(a);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kLarge * int64_t{sizeof(float)});
}
BENCHMARK(BM_TanhLarge)->UseRealTime();

void BM_SigmoidLarge(benchmark::State& state) {
  Tensor a = uniform({kLarge});
  for (auto _ : state) {
    Tensor c = kiln::sigmoid(a);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kLarge * int64_t{sizeof(float)});
}
BENCHMARK(BM_SigmoidLarge)->UseRealTime();

// gelu with its exact (erf) form, PyTorch's default.
void BM_GeluLarge(benchmark::State& state) {
  Tensor a = uniform({kLarge});
  for (auto _ : state) {
    Tensor c = kiln::gelu(a);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kLarge * int64_t{sizeof(float)});
}
BENCHMARK(BM_GeluLarge)->UseRealTime();

// Softmax over the last dim of [4096, 1024] (attention-sized rows).
void BM_SoftmaxRows(benchmark::State& state) {
  Tensor a = uniform({4096, 1024});
  for (auto _ : state) {
    Tensor c = kiln::softmax(a, 1);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * 2 * a.numel() * int64_t{sizeof(float)});
}
BENCHMARK(BM_SoftmaxRows)->UseRealTime();

void BM_SumLarge(benchmark::State& state) {
  Tensor a = uniform({kLarge});
  for (auto _ : state) {
    Tensor c = kiln::sum(a);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * kLarge * int64_t{sizeof(float)});
}
BENCHMARK(BM_SumLarge)->UseRealTime();

// --- pooling ------------------------------------------------------------------------------------

// max_pool2d(kernel 2) of the small CNN's two pooling layers at batch 128: args are C and H (= W).
// Memory-bound: reads the input once, writes values and int64 indices.
void BM_MaxPool2dForward(benchmark::State& state) {
  const int64_t c = state.range(0), hw = state.range(1);
  Tensor x = uniform({128, c, hw, hw});
  for (auto _ : state) {
    auto [values, indices] = kiln::max_pool2d_with_indices(x, 2);
    benchmark::DoNotOptimize(values.impl());
    benchmark::DoNotOptimize(indices.impl());
  }
  const int64_t out = x.numel() / 4;
  state.SetBytesProcessed(state.iterations() *
                          (x.numel() * int64_t{sizeof(float)} + out * int64_t{sizeof(float) + 8}));
}
BENCHMARK(BM_MaxPool2dForward)->Args({32, 28})->Args({64, 14})->UseRealTime();

// Its gradient: zeros of the input's shape with each output grad scattered to its argmax.
void BM_MaxPool2dBackward(benchmark::State& state) {
  const int64_t c = state.range(0), hw = state.range(1);
  Tensor x = uniform({128, c, hw, hw});
  Tensor indices = kiln::max_pool2d_with_indices(x, 2).second;
  Tensor grad = uniform(indices.shape());
  for (auto _ : state) {
    Tensor g = kiln::max_pool2d_backward(grad, indices, {hw, hw});
    benchmark::DoNotOptimize(g.impl());
  }
  state.SetBytesProcessed(state.iterations() * (x.numel() * int64_t{sizeof(float)} +
                                                grad.numel() * int64_t{sizeof(float) + 8}));
}
BENCHMARK(BM_MaxPool2dBackward)->Args({32, 28})->Args({64, 14})->UseRealTime();

// --- matmul against oneDNN's sgemm --------------------------------------------------------------

void set_flops(benchmark::State& state, int64_t n) {
  // A rate counter of 2n^3 flops per iteration: the console shows "FLOP=75.1G/s" (GFLOP/s), the
  // JSON holds flop/s. Rates divide by wall time here because the benchmarks use real time.
  state.counters["FLOP"] = benchmark::Counter(2.0 * static_cast<double>(n) * n * n,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = uniform({n, n}), b = uniform({n, n});
  for (auto _ : state) {
    Tensor c = kiln::matmul(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  set_flops(state, n);
}
BENCHMARK(BM_Matmul)->Arg(256)->Arg(512)->Arg(1024)->UseRealTime();

// The same product through oneDNN's C sgemm (row-major, no primitive cache, no allocation): the
// ceiling kiln's matmul (oneDNN matmul primitive + dispatch + output allocation) should reach.
void BM_DnnlSgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = uniform({n, n}), b = uniform({n, n});
  std::vector<float> c(static_cast<size_t>(n * n));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (auto _ : state) {
    dnnl_status_t st = dnnl_sgemm('N', 'N', n, n, n, 1.0f, pa, n, pb, n, 0.0f, c.data(), n);
    if (st != dnnl_success) {
      state.SkipWithError("dnnl_sgemm failed");
      break;
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}
BENCHMARK(BM_DnnlSgemm)->Arg(256)->Arg(512)->Arg(1024)->UseRealTime();

// --- a small training step ----------------------------------------------------------------------

// One SGD step of a 784-256-10 MLP on a batch of 64: forward (matmul, add, relu, log_softmax,
// gather-based NLL), backward, and the parameter update under NoGradGuard.
void BM_MlpStep(benchmark::State& state) {
  const int64_t batch = 64, in = 784, hidden = 256, classes = 10;
  const double lr = 0.01;
  Tensor x = uniform({batch, in});
  Tensor labels = kiln::randint(0, classes, {batch, 1});
  Tensor w1 = kiln::mul(uniform({in, hidden}), 0.05).detach().set_requires_grad(true);
  Tensor b1 = kiln::zeros({hidden}).set_requires_grad(true);
  Tensor w2 = kiln::mul(uniform({hidden, classes}), 0.05).detach().set_requires_grad(true);
  Tensor b2 = kiln::zeros({classes}).set_requires_grad(true);
  std::vector<Tensor> params = {w1, b1, w2, b2};
  for (auto _ : state) {
    Tensor h = kiln::relu(kiln::add(kiln::matmul(x, w1), b1));
    Tensor logits = kiln::add(kiln::matmul(h, w2), b2);
    Tensor loss = kiln::neg(kiln::mean(kiln::gather(kiln::log_softmax(logits, 1), 1, labels)));
    loss.backward();
    kiln::NoGradGuard no_grad;
    for (Tensor& p : params) {
      p.sub_(kiln::mul(p.grad(), lr));
      p.set_grad(Tensor());
    }
  }
}
BENCHMARK(BM_MlpStep)->UseRealTime();

// KILN_BENCH_THREADS, then --threads=N (removed before Google Benchmark parses the rest).
int take_threads_flag(std::vector<char*>& args) {
  int threads = kiln::get_num_threads();
  if (const char* env = std::getenv("KILN_BENCH_THREADS"); env != nullptr && *env != '\0')
    threads = std::stoi(env);
  std::vector<char*> rest;
  for (char* arg : args) {
    std::string_view a(arg);
    if (a.starts_with("--threads=")) {
      threads = std::stoi(std::string(a.substr(10)));
      continue;
    }
    rest.push_back(arg);
  }
  args = std::move(rest);
  return threads;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<char*> args(argv, argv + argc);
  const int threads = take_threads_flag(args);
  kiln::set_num_threads(threads);
  benchmark::AddCustomContext("kiln_threads", std::to_string(threads));
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kiln_bench: %s\n", e.what());
  return 2;
}
