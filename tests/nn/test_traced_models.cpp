// nn::function (Note [traced modules]): the zoo models traced in eval and training mode equal
// eager — outputs, running statistics, dropout masks and gradients — and the train/eval mode is
// part of the cache key.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln::nn {
namespace {

using graph::TensorSpec;
using Tensors = std::vector<Tensor>;

struct Zoo {
  std::string name;
  std::function<std::shared_ptr<Module>()> make;
  TensorSpec spec;
  Shape input;  // a call's shape (batch 3)
};

std::vector<Zoo> zoo() {
  auto encoder = [] {
    TransformerEncoderLayerOptions o;
    o.dim_feedforward = 32;
    o.batch_first = true;
    return std::make_shared<TransformerEncoder>(
        [o] { return std::make_shared<TransformerEncoderLayer>(16, 4, o); }, 2);
  };
  return {
      {"mlp",
       [] {
         return mlp(784, {32, 16}, 10);
       },
       TensorSpec({"batch", 1, 28, 28}),
       {3, 1, 28, 28}},
      {"cnn",
       [] { return small_cnn(1, 10, 28); },
       TensorSpec({"batch", 1, 28, 28}),
       {3, 1, 28, 28}},
      {"resnet18",
       [] { return resnet18(3, 10); },
       TensorSpec({"batch", 3, 16, 16}),
       {3, 3, 16, 16}},
      {"transformer_encoder", encoder, TensorSpec({"batch", 5, 16}), {3, 5, 16}},
  };
}

// Two models with the same initial weights.
std::pair<std::shared_ptr<Module>, std::shared_ptr<Module>> twins(const Zoo& z) {
  manual_seed(11);
  auto a = z.make();
  manual_seed(11);
  auto b = z.make();
  return {a, b};
}

void expect_same_state(const Module& got, const Module& want, const std::string& what) {
  const StateDict g = got.state_dict(), w = want.state_dict();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    SCOPED_TRACE(what + ": " + g[i].first);
    test::expect_bit_identical(g[i].second, w[i].second);
  }
}

TEST(TracedModels, EveryZooModelTracedInEvalModeEqualsEager) {
  for (const Zoo& z : zoo()) {
    SCOPED_TRACE(z.name);
    auto [traced, eager] = twins(z);
    traced->eval();
    eager->eval();
    // Inference: traced and called without gradients (grad mode is part of the key).
    NoGradGuard no_grad;
    graph::Function f = function(traced, {z.spec});
    for (int64_t batch : {3, 1}) {
      Shape s = z.input;
      s[0] = batch;
      Tensor x = randn(s);
      test::expect_bit_identical(f({x})[0], (*eager)(x));
    }
    EXPECT_EQ(f.stats().traces, 1);
  }
}

// Training mode: the same dropout masks (same seed), running statistics, counters and
// gradients as eager, for two steps at two batch sizes. The layout pass (Note [layout pass]),
// forced on, lays an image input with several channels out channels-last inside the graph; eager
// is then given the same layout, which it follows with the same kernels.
TEST(TracedModels, EveryZooModelTracedInTrainingModeEqualsEagerWithGradients) {
  setenv("KILN_CHANNELS_LAST_TRAINING", "1", 1);
  for (const Zoo& z : zoo()) {
    SCOPED_TRACE(z.name);
    const bool image = z.input.size() == 4 && z.input[1] > 1;
    auto [traced, eager] = twins(z);
    graph::Function f = function(traced, {z.spec});
    for (int64_t batch : {3, 2}) {
      Shape s = z.input;
      s[0] = batch;
      Tensor x = randn(s);
      manual_seed(100 + batch);
      Tensor ye = (*eager)(image ? contiguous(x, MemoryFormat::kChannelsLast) : x);
      manual_seed(100 + batch);
      Tensor yg = f({x})[0];
      test::expect_bit_identical(yg, ye);
      Tensor w = randn(ye.shape());
      sum(mul(ye, w)).backward();
      sum(mul(yg, w)).backward();
      const StateDict pe = eager->named_parameters(), pg = traced->named_parameters();
      for (size_t i = 0; i < pe.size(); ++i) {
        SCOPED_TRACE("grad of " + pe[i].first);
        test::expect_bit_identical(pg[i].second.grad(), pe[i].second.grad());
      }
      expect_same_state(*traced, *eager, "after a step");
      traced->zero_grad();
      eager->zero_grad();
    }
    EXPECT_EQ(f.stats().traces, 1);
  }
  unsetenv("KILN_CHANNELS_LAST_TRAINING");
}

TEST(TracedModels, SwitchingTheModelToEvalRetracesAndSaysWhy) {
  auto model = small_cnn(1, 10, 28);
  std::vector<std::string> log;
  graph::Function f = function(model, {TensorSpec({"batch", 1, 28, 28})},
                               {.logger = [&](const std::string& s) { log.push_back(s); }});
  Tensor x = randn({2, 1, 28, 28});
  f({x});
  model->eval();
  Tensor y = f({x})[0];
  ASSERT_EQ(log.size(), 1u);
  test::expect_contains(
      log[0], {"retracing 'SmallCnn': state changed train -> eval", "test_traced_models.cpp"});
  test::expect_bit_identical(y, (*model)(x));
  model->train();
  f({x});
  EXPECT_EQ(f.stats().traces, 2);  // back in training mode: the first trace again
  EXPECT_EQ(f.stats().hits, 2);    // the first call and this one
}

TEST(TracedModels, AModeKeyNamesTheDescendantsInTheOtherMode) {
  auto model = small_cnn(1, 10, 28);
  EXPECT_EQ(mode_key(*model), "train");
  auto* cnn = dynamic_cast<SmallCnn*>(model.get());
  ASSERT_NE(cnn, nullptr);
  cnn->bn1->eval();
  EXPECT_EQ(mode_key(*model), "train (eval: bn1)");
  model->eval();
  EXPECT_EQ(mode_key(*model), "eval");
}

TEST(TracedModels, ATrainingGraphCountsBatchesAndUpdatesTheRunningStatistics) {
  auto model = small_cnn(1, 10, 28);
  auto* cnn = dynamic_cast<SmallCnn*>(model.get());
  ASSERT_NE(cnn, nullptr);
  graph::Function f = function(model, {TensorSpec({"batch", 1, 28, 28})});
  // Tracing itself changes nothing.
  EXPECT_EQ(cnn->bn1->num_batches_tracked.item(), 0);
  test::expect_bit_identical(cnn->bn1->running_mean, zeros({32}));
  f({randn({4, 1, 28, 28})});
  f({randn({4, 1, 28, 28})});
  EXPECT_EQ(cnn->bn1->num_batches_tracked.item(), 2);
  EXPECT_GT(sum(abs(cnn->bn1->running_mean)).item(), 0);
}

// A training step's gradients, traced: kiln::grad with respect to the real parameters inside a
// trace differentiates with respect to their stand-ins (Note [traced gradients]), and the graph,
// run for any batch size, gives eager's loss and gradients.
TEST(TracedModels, ATracedTrainingStepGivesEagerLossAndGradientsForEveryBatch) {
  for (const std::string name : {"mlp", "cnn"}) {
    SCOPED_TRACE(name);
    manual_seed(5);
    auto model = make_model(name, 1, 28, 10);
    const std::vector<Tensor> params = model->parameters();
    auto step = [&](const Tensors& in) {
      Tensor loss = cross_entropy((*model)(in[0]), in[1]);
      Tensors out = kiln::grad({loss}, params);
      out.insert(out.begin(), loss);
      return out;
    };
    graph::Function f = graph::function(step,
                                        {TensorSpec({"batch", 1, 28, 28}, DType::Float32, "x"),
                                         TensorSpec({"batch"}, DType::Int64, "y")},
                                        {.name = "train_step"});
    for (int64_t batch : {4, 1}) {
      Tensor x = randn({batch, 1, 28, 28});
      Tensor y = randint(0, 10, {batch});
      // Twice each: eager then graph, from the same running statistics.
      const StateDict before = model->state_dict();
      StateDict saved;
      for (const auto& [k, v] : before) saved.emplace_back(k, v.clone());
      const Tensors eager = step({x, y});
      model->load_state_dict(saved);
      const Tensors traced = f({x, y});
      ASSERT_EQ(traced.size(), eager.size());
      for (size_t i = 0; i < eager.size(); ++i) {
        SCOPED_TRACE(i);
        test::expect_bit_identical(traced[i], eager[i]);
      }
    }
    EXPECT_EQ(f.stats().traces, 1);
  }
}

}  // namespace
}  // namespace kiln::nn
