// What the graph optimizer buys (issue 15, Note [graph passes]): for zoo models, the nodes before
// and after the passes (default, and frozen for inference), the time the passes take, the
// latency of eager, the unoptimized graph and the optimized graphs, and the peak of intermediate
// memory (allocator peak above the inputs) in eager and in the graph executor, which releases each
// value after its last reader. Medians of interleaved runs; plain text.
//
//   build/release/bench/kiln_graph_passes_bench [--reps N] [--only SUBSTRING]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln/graph/executor.h"
#include "kiln/kiln.h"
#include "kiln/nn/models.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;
using Tensors = std::vector<Tensor>;

namespace {

double seconds_of(const std::function<void()>& f, int inner) {
  const auto t0 = Clock::now();
  for (int i = 0; i < inner; ++i) f();
  return std::chrono::duration<double>(Clock::now() - t0).count() / inner;
}

// The allocator's peak above what was live before f, in MiB. `prepare` runs before the measured
// call: a graph's idle planned arenas are freed there, so that the arena the call takes counts.
double peak_mib(const std::function<void()>& f, const std::function<void()>& prepare = {}) {
  f();  // warm caches
  if (prepare) prepare();
  reset_peak_stats();
  const int64_t base = memory_stats().allocated_bytes;
  f();
  return static_cast<double>(memory_stats().peak_allocated_bytes - base) / (1 << 20);
}

// A spec with a symbolic first dim, the others as in `shape`.
graph::TensorSpec batch_spec(const Shape& shape) {
  graph::SymShape dims = graph::static_shape(shape);
  dims[0].symbol = "batch";
  return graph::TensorSpec(dims, DType::Float32);
}

// --only SUBSTRING runs the workloads whose label contains it.
std::string g_only;
bool selected(const char* label) {
  return std::string(label).find(g_only) != std::string::npos;
}

struct Variant {
  const char* label;
  bool optimize;
  bool freeze;
  bool fuse = true;
};

void compare(const char* label, const graph::Function::Fn& fn,
             const std::vector<graph::TensorSpec>& signature, const Tensors& inputs, int reps,
             int inner, bool inference) {
  if (!selected(label)) return;
  // "unfused": every pass but elementwise fusion, to show what fusion buys.
  std::vector<Variant> variants = {{"raw", false, false},
                                   {"unfused", true, false, false},
                                   {"optimized", true, false},
                                   {"frozen", true, true}};
  if (!inference) variants.pop_back();
  std::vector<graph::Function> fns;
  std::printf("%s\n", label);
  for (const Variant& v : variants) {
    graph::FunctionOptions o;
    o.name = label;
    o.optimize = v.optimize;
    o.passes.freeze = v.freeze;
    if (!v.fuse) o.passes.skip = {"fuse"};
    const auto t0 = Clock::now();
    fns.push_back(graph::function(fn, signature, o));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const graph::FunctionStats st = fns.back().stats();
    double pass_ms = 0;
    if (!st.optimizations.empty())
      for (const auto& p : st.optimizations[0].passes) pass_ms += p.ms;
    std::printf("  %-10s %4zu nodes  compile %7.2f ms (passes %6.3f ms)\n", v.label,
                fns.back().graphs()[0]->nodes.size(), ms, pass_ms);
    if (v.optimize && !st.optimizations.empty())
      std::printf("    %s\n", st.optimizations[0].format().c_str());
  }
  // A graph that computes its own gradients needs no tape: run without recording, as a compiled
  // training step will (the call itself, through Function, records one under grad mode: every
  // node reading a parameter is taped and keeps its inputs until the outputs die).
  std::vector<std::function<void()>> calls;
  std::vector<std::string> names;
  for (size_t i = 0; i < fns.size(); ++i) {
    calls.push_back([&, i] { fns[i](inputs); });
    names.push_back(variants[i].label);
  }
  if (!inference) {
    const auto optimized = fns[2].graphs()[0];
    calls.push_back([&, optimized] {
      NoGradGuard no_tape;
      graph::run(*optimized, inputs);
    });
    names.push_back("optimized, no tape");
  }
  // Interleaved rounds; the median of each.
  std::vector<std::vector<double>> t(calls.size() + 1);
  for (int r = 0; r < reps; ++r) {
    t[0].push_back(seconds_of([&] { fn(inputs); }, inner));
    for (size_t i = 0; i < calls.size(); ++i) t[i + 1].push_back(seconds_of(calls[i], inner));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double eager = median(t[0]);
  std::printf("  latency   eager %9.1f us", eager * 1e6);
  for (size_t i = 0; i < calls.size(); ++i)
    std::printf("  %s %9.1f us (%.3fx eager)", names[i].c_str(), median(t[i + 1]) * 1e6,
                median(t[i + 1]) / eager);
  std::printf("\n  peak      eager %8.2f MiB", peak_mib([&] { fn(inputs); }));
  for (size_t i = 0; i < calls.size(); ++i)
    std::printf("  %s %8.2f MiB", names[i].c_str(), peak_mib(calls[i], [&, i] {
                  if (i < fns.size()) fns[i].release_idle_arenas();
                }));
  std::printf("\n");
}

void inference(const char* label, std::shared_ptr<nn::Module> model, Shape input, int reps,
               int inner) {
  model->eval();
  NoGradGuard no_grad;
  graph::TensorSpec spec = batch_spec(input);
  compare(
      label, [&](const Tensors& in) { return Tensors{(*model)(in[0])}; }, {spec}, {randn(input)},
      reps, inner, true);
}

// Forward, cross-entropy and every parameter's gradient (Note [traced gradients]).
void training_step(const char* label, std::shared_ptr<nn::Module> model, Shape input, int reps,
                   int inner) {
  model->train();
  const Tensors params = model->parameters();
  auto step = [&](const Tensors& in) {
    Tensor loss = cross_entropy((*model)(in[0]), in[1]);
    Tensors out = kiln::grad({loss}, params);
    out.push_back(loss);
    return out;
  };
  const int64_t batch = input[0];
  compare(label, step, {batch_spec(input), graph::TensorSpec({"batch"}, DType::Int64)},
          {randn(input), randint(0, 10, {batch})}, reps, inner, false);
}

// A whole training step, eager (zero_grad, forward, backward, step) against compile_train_step
// (Note [compiled training step]), on twin models; per-step time and the allocator's peak.
void compiled_step(const char* label, const std::function<std::shared_ptr<nn::Module>()>& make,
                   Shape input, int reps, int inner) {
  if (!selected(label)) return;
  manual_seed(1);
  auto eager = make();
  manual_seed(1);
  auto compiled = make();
  optim::Adam opt_e(eager->parameters(), {.lr = 1e-3}), opt_c(compiled->parameters(), {.lr = 1e-3});
  auto ce = [](const Tensor& logits, const Tensor& target) {
    return cross_entropy(logits, target);
  };
  train::CompiledStep step = train::compile_train_step(*compiled, ce, opt_c);
  Tensor x = randn(input), y = randint(0, 10, {input[0]});
  auto eager_step = [&] {
    opt_e.zero_grad();
    Tensor loss = ce((*eager)(x), y);
    loss.backward();
    opt_e.step();
  };
  auto compiled_call = [&] { step(x, y); };
  const auto t0 = Clock::now();
  compiled_call();  // compiles
  const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<double> te, tc;
  for (int r = 0; r < reps; ++r) {
    te.push_back(seconds_of(eager_step, inner));
    tc.push_back(seconds_of(compiled_call, inner));
  }
  std::sort(te.begin(), te.end());
  std::sort(tc.begin(), tc.end());
  const double e = te[te.size() / 2], c = tc[tc.size() / 2];
  std::printf("%s\n  first call (trace + passes + step) %.1f ms, %zu nodes\n", label, compile_ms,
              step.function()->graphs()[0]->nodes.size());
  std::printf("  step      eager %9.1f us  compiled %9.1f us (%.3fx eager)\n", e * 1e6, c * 1e6,
              c / e);
  std::printf("  peak      eager %8.2f MiB  compiled %8.2f MiB\n", peak_mib(eager_step),
              peak_mib(compiled_call, [&] { step.function()->release_idle_arenas(); }));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int reps = 5;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      g_only = argv[++i];
  set_num_threads(2);
  manual_seed(0);
  inference("mlp 784-256-10 inference, batch 1", nn::mlp(784, {256}, 10), {1, 784}, reps, 500);
  inference("small_cnn inference, batch 64", nn::small_cnn(1, 10, 28), {64, 1, 28, 28}, reps, 3);
  {
    // Separate Conv2d / BatchNorm2d / ReLU modules: the conv_bn pass's case.
    auto vgg = std::make_shared<nn::Sequential>();
    int64_t in = 3;
    for (int64_t out : {32, 32, 64}) {
      vgg->push_back(std::make_shared<nn::Conv2d>(in, out, 3, Conv2dOptions{.padding = 1}));
      vgg->push_back(std::make_shared<nn::BatchNorm2d>(out));
      vgg->push_back(std::make_shared<nn::ReLU>());
      in = out;
    }
    inference("conv-bn-relu x3 (Sequential) inference, batch 32 (3x32x32)", vgg, {32, 3, 32, 32},
              reps, 3);
  }
  {
    // An elementwise tail as normalization + activation + gated residual leave it (memory-bound:
    // five passes over 8 MiB unfused, one fused).
    Tensor scale = randn({4096}), shift = randn({4096}), gamma = randn({4096});
    auto tail = [&](const Tensors& in) {
      return Tensors{in[1] + gamma * gelu(in[0] * scale + shift, "tanh")};
    };
    auto cheap = [&](const Tensors& in) {
      return Tensors{in[1] + gamma * relu(in[0] * scale + shift)};
    };
    NoGradGuard no_grad;
    compare("elementwise tail r + g * relu(x * s + b), [512, 4096]", cheap,
            {batch_spec({512, 4096}), batch_spec({512, 4096})},
            {randn({512, 4096}), randn({512, 4096})}, reps, 20, true);
    compare("elementwise tail r + g * gelu_tanh(x * s + b), [512, 4096]", tail,
            {batch_spec({512, 4096}), batch_spec({512, 4096})},
            {randn({512, 4096}), randn({512, 4096})}, reps, 5, true);
  }
  inference("resnet18 inference, batch 1 (3x32x32)", nn::resnet18(3, 10), {1, 3, 32, 32}, reps, 20);
  inference("resnet18 inference, batch 64 (3x32x32)", nn::resnet18(3, 10), {64, 3, 32, 32}, reps,
            1);
  compiled_step(
      "mlp 784-256-10 Adam step, batch 64", [] { return nn::mlp(784, {256}, 10); }, {64, 1, 28, 28},
      reps, 50);
  compiled_step(
      "small_cnn Adam step, batch 64", [] { return nn::small_cnn(1, 10, 28); }, {64, 1, 28, 28},
      reps, 2);
  compiled_step(
      "resnet18 Adam step, batch 32 (3x32x32)", [] { return nn::resnet18(3, 10); }, {32, 3, 32, 32},
      reps, 1);
  training_step("mlp 784-256-10 gradients, batch 64", nn::mlp(784, {256}, 10), {64, 784}, reps,
                100);
  training_step("small_cnn gradients, batch 64", nn::small_cnn(1, 10, 28), {64, 1, 28, 28}, reps,
                2);
  training_step("resnet18 gradients, batch 32 (3x32x32)", nn::resnet18(3, 10), {32, 3, 32, 32},
                reps, 1);
}
