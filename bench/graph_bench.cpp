// Graph mode's costs (issue 14): tracing time of the zoo models and the executor's overhead per
// node against eager, in one run on this machine. Plain text; medians of repeated runs.
//
//   build/release/bench/kiln_graph_bench [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/models.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;
using Tensors = std::vector<Tensor>;

template <class F>
double median_seconds(int reps, F f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Times making a graph::function (tracing, with the two probe traces of Note [symbolic dims]).
void report_trace(const char* label, const graph::Function::Fn& fn,
                  const std::vector<graph::TensorSpec>& signature, int reps) {
  size_t nodes = 0;
  double s = 0;
  try {
    s = median_seconds(reps,
                       [&] { nodes = graph::function(fn, signature).graphs()[0]->nodes.size(); });
  } catch (const Error& e) {
    std::printf("trace %-28s cannot be traced yet: %s\n", label, e.what());
    return;
  }
  std::printf("trace %-28s %8.2f ms  (%zu nodes; two probe traces, Note [symbolic dims])\n", label,
              s * 1e3, nodes);
}

void trace_time(const char* label, std::shared_ptr<nn::Module> model, bool training,
                graph::TensorSpec spec, int reps) {
  model->train(training);
  // An eval-mode trace is an inference graph: no gradient recorded (conv + bn fuse).
  std::optional<NoGradGuard> no_grad;
  if (!training) no_grad.emplace();
  report_trace(
      label, [&](const Tensors& in) { return Tensors{(*model)(in[0])}; }, {spec}, reps);
}

// A whole training step's gradients: forward, cross-entropy, and kiln::grad with respect to every
// parameter (Note [traced gradients]), traced with a symbolic batch.
void trace_step_time(const char* label, std::shared_ptr<nn::Module> model, graph::TensorSpec spec,
                     int reps) {
  const std::vector<Tensor> params = model->parameters();
  auto step = [&](const Tensors& in) {
    Tensor loss = cross_entropy((*model)(in[0]), in[1]);
    Tensors out = kiln::grad({loss}, params);
    out.push_back(loss);
    return out;
  };
  report_trace(label, step, {spec, graph::TensorSpec({"batch"}, DType::Int64)}, reps);
}

void executor_overhead(int reps) {
  manual_seed(0);
  auto model = nn::mlp(784, {256, 256}, 10);
  model->eval();
  NoGradGuard no_grad;
  graph::Function f = graph::function([&](const Tensors& in) { return Tensors{(*model)(in[0])}; },
                                      {graph::TensorSpec({"batch", 784})});
  const size_t nodes = f.graphs()[0]->nodes.size();
  for (int64_t batch : {1, 64}) {
    Tensor x = randn({batch, 784});
    constexpr int kInner = 2000;
    // Interleaved so that drift hits both alike.
    std::vector<double> eager, graph;
    for (int r = 0; r < reps; ++r) {
      eager.push_back(median_seconds(1,
                                     [&] {
                                       for (int i = 0; i < kInner; ++i) (*model)(x);
                                     }) /
                      kInner);
      graph.push_back(median_seconds(1,
                                     [&] {
                                       for (int i = 0; i < kInner; ++i) f({x});
                                     }) /
                      kInner);
    }
    std::sort(eager.begin(), eager.end());
    std::sort(graph.begin(), graph.end());
    const double e = eager[eager.size() / 2], g = graph[graph.size() / 2];
    std::printf(
        "mlp 784-256-256-10 batch %-3lld eager %8.2f us  graph %8.2f us  (%zu nodes: %+.0f ns per "
        "node, graph/eager %.3f)\n",
        static_cast<long long>(batch), e * 1e6, g * 1e6, nodes, (g - e) * 1e9 / nodes, g / e);
  }
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int reps = 5;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
  set_num_threads(2);
  trace_time("resnet18 eval (3x32x32)", nn::resnet18(3, 10), false,
             graph::TensorSpec({"batch", 3, 32, 32}), reps);
  trace_time("resnet18 train fwd (3x32x32)", nn::resnet18(3, 10), true,
             graph::TensorSpec({"batch", 3, 32, 32}), reps);
  trace_step_time("resnet18 train step (3x32x32)", nn::resnet18(3, 10),
                  graph::TensorSpec({"batch", 3, 32, 32}), reps);
  trace_time("small_cnn eval (1x28x28)", nn::small_cnn(1, 10, 28), false,
             graph::TensorSpec({"batch", 1, 28, 28}), reps);
  executor_overhead(reps);
}
