// The memory planner's peaks (issue 15, Note [memory planner]): for the zoo models, the peak of
// intermediate memory (the caching allocator's peak above what was allocated before the call:
// parameters, optimizer state and inputs excluded, outputs included) of
//   eager            the model called eagerly (inference: eval + no_grad; training: zero_grad,
//                    forward, backward, Adam step)
//   graph            the optimized graph on the caching allocator, each value released after its
//                    last reader (plan_memory = false)
//   planned          the same graph on its planned arena (plan_memory = true), arena included
// and the plan itself: its arena, the lower bound of any placement (the most planned bytes alive
// at once), the sum of the planned allocations (no reuse), the allocations computed in place.
//
//   build/release/bench/kiln_memory_plan_bench [--only SUBSTRING] [--batch N] [--train-batch N]
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "kiln/kiln.h"
#include "kiln/nn/models.h"
#include "kiln/nn/traced.h"
#include "kiln/train/compiled_step.h"

using namespace kiln;
using Tensors = std::vector<Tensor>;

namespace {

constexpr double kMiB = 1 << 20;

// The allocator's peak above what was live before the call, in MiB (the call runs twice before,
// so that a graph has recorded and replayed its plan).
double peak_mib(const std::function<void()>& f, const std::function<void()>& prepare = {}) {
  f();
  f();
  if (prepare) prepare();
  reset_peak_stats();
  const int64_t base = memory_stats().allocated_bytes;
  f();
  return static_cast<double>(memory_stats().peak_allocated_bytes - base) / kMiB;
}

std::string g_only;
bool selected(const std::string& label) {
  return label.find(g_only) != std::string::npos;
}

void print_row(const std::string& label, double eager, double graph, double planned,
               const graph::Function& fn) {
  const auto stats = fn.memory_stats();
  std::printf("%-34s eager %8.2f  graph %8.2f  planned %8.2f MiB  (%.2fx eager, %.2fx graph)\n",
              label.c_str(), eager, graph, planned, planned / eager, planned / graph);
  if (stats.empty() || !stats[0].last_plan) return;
  const graph::MemoryPlan& p = *stats[0].last_plan;
  std::printf(
      "%-34s arena %8.2f  bound %8.2f  no reuse %8.2f MiB  unplanned %8.2f MiB  "
      "%d allocations, %d in place; replays %d, diverged %d\n",
      "", p.arena_bytes / kMiB, p.live_peak_bytes / kMiB, p.planned_bytes / kMiB,
      p.unplanned_bytes / kMiB, p.planned, p.in_place, stats[0].replays, stats[0].diverged);
}

void inference(const std::string& label, const std::shared_ptr<nn::Module>& model, Shape input) {
  if (!selected(label)) return;
  model->eval();
  NoGradGuard no_grad;
  graph::SymShape dims = graph::static_shape(input);
  dims[0].symbol = "batch";
  const std::vector<graph::TensorSpec> sig = {graph::TensorSpec(dims, DType::Float32, "x")};
  graph::Function plain = nn::function(model, sig, {.name = label, .plan_memory = false});
  graph::Function planned = nn::function(model, sig, {.name = label, .plan_memory = true});
  Tensor x = randn(input);
  const double eager = peak_mib([&] { (*model)(x); });
  const double graph = peak_mib([&] { plain({x}); });
  const double plan = peak_mib([&] { planned({x}); }, [&] { planned.release_idle_arenas(); });
  print_row(label, eager, graph, plan, planned);
}

void training(const std::string& label, const std::function<std::shared_ptr<nn::Module>()>& make,
              Shape input) {
  if (!selected(label)) return;
  auto ce = [](const Tensor& logits, const Tensor& target) {
    return cross_entropy(logits, target);
  };
  Tensor x = randn(input), y = randint(0, 10, {input[0]});
  manual_seed(1);
  auto eager_model = make();
  optim::Adam eager_opt(eager_model->parameters(), {.lr = 1e-3});
  const double eager = peak_mib([&] {
    eager_opt.zero_grad();
    ce((*eager_model)(x), y).backward();
    eager_opt.step();
  });
  eager_opt.zero_grad();
  double graph_peak = 0;
  for (bool plan : {false, true}) {
    manual_seed(1);
    auto model = make();
    optim::Adam opt(model->parameters(), {.lr = 1e-3});
    train::CompiledStep step = train::compile_train_step(*model, ce, opt, {.plan_memory = plan});
    const double peak = peak_mib(
        [&] {
          opt.zero_grad();
          step(x, y);
        },
        [&] { step.function()->release_idle_arenas(); });
    if (!plan)
      graph_peak = peak;
    else
      print_row(label, eager, graph_peak, peak, *step.function());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int64_t batch = 64, train_batch = 128;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      g_only = argv[++i];
    else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      batch = std::max<int64_t>(1, std::atoll(argv[++i]));
    else if (std::strcmp(argv[i], "--train-batch") == 0 && i + 1 < argc)
      train_batch = std::max<int64_t>(1, std::atoll(argv[++i]));
  }
  set_num_threads(2);
  manual_seed(0);
  const std::string b = " b" + std::to_string(batch), tb = " b" + std::to_string(train_batch);
  inference("mlp inference" + b, nn::mlp(784, {256}, 10), {batch, 784});
  inference("small_cnn inference" + b, nn::small_cnn(1, 10, 28), {batch, 1, 28, 28});
  inference("resnet18 inference" + b, nn::resnet18(3, 10), {batch, 3, 32, 32});
  inference("resnet18 inference b1", nn::resnet18(3, 10), {1, 3, 32, 32});
  training("mlp Adam step" + tb, [] { return nn::mlp(784, {256}, 10); }, {train_batch, 784});
  training("small_cnn Adam step" + tb, [] { return nn::small_cnn(1, 10, 28); },
           {train_batch, 1, 28, 28});
  training("resnet18 Adam step" + tb, [] { return nn::resnet18(3, 10); }, {train_batch, 3, 32, 32});
  return 0;
}
