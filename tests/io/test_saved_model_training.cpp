// Training signatures (Note [training signatures]): a bundle that holds a training step beside
// serving_default is fine-tuned without the model's code exactly as the model trains eagerly, and
// the fine-tuned bundle saves and loads.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "tests/io/temp_files.h"
#include "tests/support/test_util.h"

namespace kiln::io {
namespace {

using graph::Dim;
using graph::TensorSpec;
using test::expect_bit_identical;
using test::expect_error;
using testing::TempRoot;

// A classifier with a batch norm (its statistics are effects of the training graph).
std::shared_ptr<nn::Module> classifier(uint64_t seed) {
  auto m = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::BatchNorm1d>(8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3));
  Generator gen(seed);
  NoGradGuard no_grad;
  for (Tensor& p : m->parameters()) p.copy_(mul(randn(p.shape(), {}, &gen), 0.4));
  return m;
}

Tensor loss_fn(const Tensor& logits, const Tensor& target) {
  return cross_entropy(logits, target);
}

const std::vector<TensorSpec> kInputs = {
    TensorSpec({Dim{0, "batch"}, Dim{6, ""}}, DType::Float32, "x")};
const TensorSpec kTarget({Dim{0, "batch"}}, DType::Int64, "target");

void save_with_training(nn::Module& model, const std::string& dir) {
  save_model(
      {serving_function(model, kInputs), training_function(model, loss_fn, kInputs, kTarget)}, dir);
}

TEST(SavedModelTraining, FineTuningTheLoadedBundleIsEagerTraining) {
  auto eager = classifier(1);
  auto exported = classifier(1);
  TempRoot dir("saved_model_training");
  save_with_training(*exported, dir / "bundle");
  const SavedModel loaded = load_model(dir / "bundle");

  const SignatureDef& train = loaded.signature("train");
  EXPECT_EQ(train.method, "train");
  ASSERT_EQ(train.inputs.size(), 2u);
  EXPECT_EQ(train.inputs[1].describe(), "target: int64[-1 (batch)]");
  EXPECT_EQ(train.outputs[0].name, "loss");
  ASSERT_EQ(train.gradients.size(), 6u);  // two weights, two biases, the batch norm's two
  EXPECT_EQ(train.gradients[0],
            (std::pair<std::string, std::string>{"gradient/0.weight", "0.weight"}));
  const std::vector<Tensor> trainable = loaded.trainable_variables();
  ASSERT_EQ(trainable.size(), 6u);
  for (const Tensor& t : trainable) EXPECT_TRUE(t.requires_grad());

  optim::SGD eager_sgd(eager->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD loaded_sgd(trainable, {.lr = 0.1, .momentum = 0.9});
  eager->train();
  Generator gen(2);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(step);
    const int64_t batch = step == 3 ? 5 : 16;  // a short last batch: the batch is symbolic
    const Tensor x = randn({batch, 6}, {}, &gen);
    const Tensor y = to_dtype(mul(rand({batch}, {}, &gen), 2.99), DType::Int64);
    eager_sgd.zero_grad();
    const Tensor want = loss_fn((*eager)(x), y);
    want.backward();
    eager_sgd.step();
    loaded_sgd.zero_grad();
    const Tensor got = loaded.train_step("train", {x, y});
    loaded_sgd.step();
    expect_bit_identical(got, want.detach());
  }
  // The serving graph sees the fine-tuned weights and batch-norm statistics.
  const Tensor x = randn({7, 6}, {}, &gen);
  eager->eval();
  const Tensor want = [&] {
    NoGradGuard no_grad;
    return (*eager)(x);
  }();
  const Tensor got = [&] {
    NoGradGuard no_grad;
    return loaded({x})[0];
  }();
  expect_bit_identical(got, want);

  // The fine-tuned bundle saves, loads and computes the same; the original is untouched.
  save_model(loaded, dir / "tuned");
  const SavedModel tuned = load_model(dir / "tuned");
  ASSERT_EQ(tuned.signatures().size(), 2u);
  EXPECT_EQ(tuned.signature("train").gradients, train.gradients);
  NoGradGuard no_grad;
  expect_bit_identical(tuned({x})[0], want);
  const Tensor before = [&] {
    auto fresh = classifier(1);
    fresh->eval();
    return (*fresh)(x);
  }();
  expect_bit_identical(load_model(dir / "bundle")({x})[0], before);
}

TEST(SavedModelTraining, GradientsAccumulateAsBackwardDoes) {
  auto model = classifier(3);
  TempRoot dir("saved_model_training");
  save_with_training(*model, dir / "bundle");
  const SavedModel loaded = load_model(dir / "bundle");
  Generator gen(4);
  const Tensor x = randn({8, 6}, {}, &gen);
  const Tensor y = to_dtype(mul(rand({8}, {}, &gen), 2.99), DType::Int64);
  loaded.train_step("train", {x, y});
  const Tensor once = loaded.trainable_variables()[0].grad().clone();
  loaded.train_step("train", {x, y});
  // In train mode the batch norm normalizes with the batch's own statistics: the same batch
  // gives the same gradient again, added to the first.
  const Tensor twice = loaded.trainable_variables()[0].grad();
  EXPECT_LE(max(abs(sub(twice, mul(once, 2.0)))).item<float>(), 1e-5f);
}

TEST(SavedModelTraining, MisuseIsAnError) {
  auto model = classifier(5);
  TempRoot dir("saved_model_training");
  save_model(*model, kInputs, dir / "serving_only");
  const SavedModel serving = load_model(dir / "serving_only");
  EXPECT_TRUE(serving.trainable_variables().empty());
  expect_error(
      [&] {
        serving.train_step("serving_default", {randn({2, 6})});
      },
      {"computes no gradients: train_step runs a training signature"});
  expect_error([&] { training_function(*model, nullptr, kInputs, kTarget); },
               {"no loss function given"});
  save_with_training(*model, dir / "bundle");
  const SavedModel loaded = load_model(dir / "bundle");
  expect_error([&] { loaded.train_step("train", {randn({2, 6})}); }, {"expected 2 inputs"});
  expect_error([&] { loaded.train_step("nope", {}); }, {"has no signature 'nope'; it has"});
}

}  // namespace
}  // namespace kiln::io
