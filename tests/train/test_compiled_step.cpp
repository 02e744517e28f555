// compile_train_step and Trainer's compile option (Note [compiled training step]): compiled
// training equals eager training, step for step.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <tuple>

#include "kiln/kiln.h"
#include "kiln/nn/models.h"
#include "tests/support/test_util.h"
#include "tests/support/toy_data.h"

namespace kiln::train {
namespace {

Tensor ce(const Tensor& logits, const Tensor& target) {
  return cross_entropy(logits, target);
}

// The largest |a - b| / max(|b|, 1) over every entry of every tensor of two state dicts.
double state_difference(const nn::Module& a, const nn::Module& b) {
  const nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  EXPECT_EQ(sa.size(), sb.size());
  double worst = 0;
  for (size_t i = 0; i < sa.size() && i < sb.size(); ++i) {
    const Tensor x = to_dtype(sa[i].second, DType::Float64);
    const Tensor y = to_dtype(sb[i].second, DType::Float64);
    worst = std::max(worst, max(abs(x - y) / maximum(abs(y), ones_like(y))).item());
  }
  return worst;
}

// Trains twins for `steps` batches (the last one short), eager and compiled; returns the largest
// relative difference of losses and of the final states. `eager_channels_last`: eager is fed the
// batch channels-last (what the layout pass does inside the graph).
template <class MakeOpt>
std::pair<double, double> train_twins(const std::function<std::shared_ptr<nn::Module>()>& make,
                                      Shape batch_shape, int steps, MakeOpt make_opt,
                                      DType dtype = DType::Float32, int* traces = nullptr,
                                      int* batch_norm_nodes = nullptr,
                                      bool eager_channels_last = false) {
  manual_seed(21);
  auto eager = make();
  manual_seed(21);
  auto compiled = make();
  eager->to(dtype);
  compiled->to(dtype);
  auto opt_e = make_opt(eager->parameters());
  auto opt_c = make_opt(compiled->parameters());
  CompiledStep step = compile_train_step(*compiled, ce, *opt_c);
  double loss_diff = 0;
  for (int s = 0; s < steps; ++s) {
    Shape shape = batch_shape;
    if (s == steps - 1) shape[0] = std::max<int64_t>(1, shape[0] / 2 + 1);  // a short batch
    Tensor x = to_dtype(randn(shape), dtype);
    Tensor y = randint(0, 10, {shape[0]});
    // The same dropout masks on both sides.
    const uint64_t seed = 100 + static_cast<uint64_t>(s);
    manual_seed(seed);
    opt_e->zero_grad();
    Tensor loss_e =
        ce((*eager)(eager_channels_last ? contiguous(x, MemoryFormat::kChannelsLast) : x), y);
    loss_e.backward();
    opt_e->step();
    manual_seed(seed);
    const CompiledStep::Result r = step(x, y);
    const double le = loss_e.item(), lc = r.loss.item();
    loss_diff = std::max(loss_diff, std::abs(le - lc) / std::max(std::abs(le), 1.0));
  }
  if (traces != nullptr) *traces = step.function()->stats().traces;
  if (batch_norm_nodes != nullptr) {
    *batch_norm_nodes = 0;
    for (const graph::Node& n : step.function()->graphs().back()->nodes)
      *batch_norm_nodes += std::string(n.op->name()) == "batch_norm";
  }
  return {loss_diff, state_difference(*compiled, *eager)};
}

auto adam = [](std::vector<Tensor> p) {
  return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-3});
};
auto sgd = [](std::vector<Tensor> p) {
  return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
};

TEST(CompiledStep, SmallCnnTrainsAsEagerFor20StepsWithOneCompile) {
  int traces = 0;
  auto [loss, state] = train_twins([] { return nn::small_cnn(1, 10, 8); }, {6, 1, 8, 8}, 20, adam,
                                   DType::Float32, &traces);
  EXPECT_LE(loss, 1e-5);
  EXPECT_LE(state, 1e-5);
  EXPECT_EQ(traces, 1) << "the short last batch reuses the symbolic-batch graph";
}

TEST(CompiledStep, SmallCnnInFloat64IsExact) {
  auto [loss, state] =
      train_twins([] { return nn::small_cnn(1, 10, 8); }, {4, 1, 8, 8}, 20, sgd, DType::Float64);
  EXPECT_EQ(loss, 0.0);
  EXPECT_EQ(state, 0.0);
}

// The compiled step lays its activations out channels-last where the CPU's convolutions are
// faster so (Note [layout pass]); both answers are forced here, so that every CPU tests both.
// With the layout, the graph runs the kernels eager runs on a channels-last input, and equals
// that; against NCHW eager it agrees only within float32 rounding, which Adam's first steps
// (update ~ lr * sign(g) for a gradient at rounding level) and relu masks amplify beyond 1e-5
// (measured: 1.4e-3 in a weight after one Adam step).
TEST(CompiledStep, ResNet18TrainsAsEagerFor20Steps) {
  for (bool layout : {true, false}) {
    SCOPED_TRACE(layout ? "channels-last" : "NCHW");
    setenv("KILN_CHANNELS_LAST_TRAINING", layout ? "1" : "0", 1);
    auto [loss, state] = train_twins([] { return nn::resnet18(3, 10); }, {2, 3, 8, 8}, 20, sgd,
                                     DType::Float32, nullptr, nullptr, layout);
    unsetenv("KILN_CHANNELS_LAST_TRAINING");
    EXPECT_LE(loss, 1e-5);
    EXPECT_LE(state, 1e-5);
  }
}

// With the training graph's recomputed activations (Note [rematerialization]) and hoisted
// updates (Note [hoisting writes]), still exactly eager's numbers.
TEST(CompiledStep, ResNet18InFloat64IsExact) {
  int batch_norms = 0;
  auto [loss, state] = train_twins([] { return nn::resnet18(3, 10); }, {2, 3, 8, 8}, 2, adam,
                                   DType::Float64, nullptr, &batch_norms);
  EXPECT_EQ(loss, 0.0);
  EXPECT_EQ(state, 0.0);
  EXPECT_GT(batch_norms, 20) << "the 20 batch norms, and copies recomputing activations";
}

TEST(CompiledStep, AStepWithGradModeOffIsAnError) {
  auto model = nn::mlp(4, {8}, 10);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  CompiledStep step = compile_train_step(*model, ce, opt);
  NoGradGuard off;
  test::expect_error(
      [&] {
        step(randn({2, 4}), randint(0, 10, {2}));
      },
      {"[compile_train_step]", "grad mode is off", "test_compiled_step.cpp"});
}

TEST(CompiledStep, TrainerCompileFitsAsEagerFit) {
  auto run = [](bool compile) {
    manual_seed(7);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 16),
                                                  std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(16, 2));
    optim::Adam opt(model->parameters(), {.lr = 0.05});
    Trainer trainer;
    trainer.compile(*model, opt, ce, {"accuracy"});
    data::DataLoader loader(test::separable(100, 3),
                            data::DataLoaderOptions{.batch_size = 16, .shuffle = true, .seed = 1});
    return trainer.fit(loader, FitOptions{.epochs = 3, .verbose = false, .compile = compile});
  };
  const History eager = run(false), compiled = run(true);
  ASSERT_EQ(compiled.metrics.at("loss").size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_NEAR(compiled.metrics.at("loss")[e], eager.metrics.at("loss")[e], 1e-6);
    EXPECT_EQ(compiled.metrics.at("accuracy")[e], eager.metrics.at("accuracy")[e]);
  }
}

// The largest |a - b| over every tensor of two optimizer snapshots; their metadata (step counts,
// hyperparameters) must be equal.
double optimizer_difference(const optim::Optimizer& a, const optim::Optimizer& b) {
  const optim::OptimizerState sa = a.state_dict(), sb = b.state_dict();
  EXPECT_EQ(sa.meta, sb.meta);
  EXPECT_EQ(sa.tensors.size(), sb.tensors.size());
  double worst = 0;
  for (const auto& [name, t] : sa.tensors) {
    if (!sb.tensors.count(name)) {
      ADD_FAILURE() << "no " << name;
      continue;
    }
    worst = std::max(worst, max(abs(t - sb.tensors.at(name))).item());
  }
  return worst;
}

TEST(CompiledStep, TheUpdatesAreNodesOfTheGraphAndTheGradientsStayInside) {
  manual_seed(3);
  auto model = nn::mlp(4, {8}, 10);
  optim::Adam opt(model->parameters(), {.lr = 0.01});
  CompiledStep step = compile_train_step(*model, ce, opt);
  step(randn({5, 4}), randint(0, 10, {5}));
  const auto graph = step.function()->graphs()[0];
  int updates = 0;
  for (const graph::Node& n : graph->nodes) updates += std::string(n.op->name()) == "adam_update";
  EXPECT_EQ(updates, static_cast<int>(model->parameters().size()));
  EXPECT_EQ(graph->outputs.size(), 2u) << "loss and logits only: no gradient leaves the graph";
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_EQ(opt.state(0, 0).step, 1);
}

TEST(CompiledStep, OptimizerStateAndAScheduledLearningRateFollowEagerWithoutRetracing) {
  auto run = [](bool compiled) {
    manual_seed(5);
    auto model = nn::mlp(6, {16}, 10);
    auto opt = std::make_unique<optim::Adam>(model->parameters(),
                                             optim::AdamOptions{.lr = 0.02, .amsgrad = true});
    optim::CosineAnnealingLR schedule(*opt, 6);
    std::optional<CompiledStep> step;
    if (compiled) step.emplace(compile_train_step(*model, ce, *opt));
    manual_seed(6);
    for (int s = 0; s < 8; ++s) {
      Tensor x = randn({7, 6}), y = randint(0, 10, {7});
      if (step) {
        (*step)(x, y);
      } else {
        opt->zero_grad();
        ce((*model)(x), y).backward();
        opt->step();
      }
      schedule.step();
    }
    const int traces = step ? step->function()->stats().traces : 0;
    return std::make_tuple(model, std::move(opt), traces);
  };
  auto [eager_model, eager_opt, t0] = run(false);
  auto [model, opt, traces] = run(true);
  EXPECT_LE(state_difference(*model, *eager_model), 1e-6);
  EXPECT_LE(optimizer_difference(*opt, *eager_opt), 1e-6);
  EXPECT_EQ(traces, 1) << "the learning rate and step count are inputs, not attributes";
}

TEST(CompiledStep, ALoadedOptimizerStateIsWhatTheNextStepsUse) {
  auto run = [](bool compiled) {
    manual_seed(8);
    auto model = nn::mlp(6, {16}, 10);
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    std::optional<CompiledStep> step;
    if (compiled) step.emplace(compile_train_step(*model, ce, opt));
    manual_seed(9);
    auto one = [&] {
      Tensor x = randn({7, 6}), y = randint(0, 10, {7});
      if (step) {
        (*step)(x, y);
        return;
      }
      opt.zero_grad();
      ce((*model)(x), y).backward();
      opt.step();
    };
    one();
    const optim::OptimizerState snapshot = opt.state_dict();
    one();
    one();
    opt.load_state_dict(snapshot);
    one();
    return model;
  };
  EXPECT_LE(state_difference(*run(true), *run(false)), 1e-6);
}

}  // namespace
}  // namespace kiln::train
