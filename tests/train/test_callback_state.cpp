// Callbacks' state across a resume: a run split in two processes (state() stored, load_state()
// into a fresh callback before the second fit) decides exactly as the uninterrupted run. Also the
// hooks the `kiln` command builds on: lr in the epoch logs and each step's batch logs, and the
// validation batches seen by callbacks.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/rng.h"
#include "kiln/data/loader.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/loss.h"
#include "kiln/optim/sgd.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/fit.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_util.h"
#include "tests/support/toy_data.h"

namespace kiln::train {
namespace {

using test::expect_error;

// Drives a callback through epochs [begin, end) of scripted scores, as fit does: on_train_begin,
// then update_logs and on_epoch_end per epoch. Returns whether it asked to stop, per epoch.
std::vector<bool> drive(Callback& cb, const std::vector<double>& scores, int begin, int end) {
  std::vector<bool> stops;
  cb.on_train_begin();
  for (int e = begin; e < end; ++e) {
    Logs logs{{"val_loss", scores[static_cast<size_t>(e)]}};
    cb.update_logs(e, logs);
    stops.push_back(cb.on_epoch_end(e, logs));
  }
  return stops;
}

// A JSON round trip through text, as the checkpoint's metadata stores it.
nlohmann::json stored(const Callback& cb) {
  return nlohmann::json::parse(cb.state().dump());
}

const std::vector<double> kScores = {1.0, 0.8, 0.85, 0.9, 0.7, 0.75, 0.76, 0.77, 0.78, 0.79};

TEST(CallbackState, EarlyStoppingResumedStopsWhereTheUninterruptedRunStops) {
  for (int split = 1; split < 9; ++split) {
    EarlyStopping whole("val_loss", 3);
    const std::vector<bool> expected = drive(whole, kScores, 0, 10);
    EarlyStopping first("val_loss", 3), second("val_loss", 3);
    std::vector<bool> got = drive(first, kScores, 0, split);
    second.load_state(stored(first));
    const std::vector<bool> rest = drive(second, kScores, split, 10);
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, expected) << "split after epoch " << split;
    EXPECT_DOUBLE_EQ(second.best(), whole.best());
    EXPECT_EQ(second.best_epoch(), whole.best_epoch());
  }
}

TEST(CallbackState, EarlyStoppingWithoutLoadedStateStartsAfresh) {
  // The reset of on_train_begin applies: a second fit without load_state forgets the first.
  EarlyStopping cb("val_loss", 2);
  drive(cb, kScores, 0, 3);
  cb.load_state(nlohmann::json{{"wait", 0}, {"has_best", true}, {"best", 0.1}, {"best_epoch", 0}});
  drive(cb, kScores, 3, 4);
  EXPECT_DOUBLE_EQ(cb.best(), 0.1);  // 0.9 at epoch 3 is no improvement on the loaded 0.1
  drive(cb, kScores, 4, 5);
  EXPECT_DOUBLE_EQ(cb.best(), 0.7);  // loaded once only; this fit started afresh
}

TEST(CallbackState, ReduceLROnPlateauResumedLowersTheLrAsTheUninterruptedRun) {
  nn::Linear layer(2, 2);
  for (int split = 1; split < 9; ++split) {
    optim::SGD whole_sgd(layer.parameters(), optim::SGDOptions{.lr = 1.0});
    ReduceLROnPlateau whole("val_loss", 0.5, 2, 0.0, 1);
    whole.set_context(nullptr, &whole_sgd);
    std::vector<double> expected;
    whole.on_train_begin();
    for (int e = 0; e < 10; ++e) {
      whole.on_epoch_end(e, {{"val_loss", kScores[static_cast<size_t>(e)]}});
      expected.push_back(whole_sgd.param_groups()[0].lr());
    }

    optim::SGD sgd(layer.parameters(), optim::SGDOptions{.lr = 1.0});
    std::vector<double> got;
    ReduceLROnPlateau first("val_loss", 0.5, 2, 0.0, 1);
    first.set_context(nullptr, &sgd);
    first.on_train_begin();
    for (int e = 0; e < split; ++e) {
      first.on_epoch_end(e, {{"val_loss", kScores[static_cast<size_t>(e)]}});
      got.push_back(sgd.param_groups()[0].lr());
    }
    // The optimizer's lr travels in its own state; the callback's decides the next reductions.
    ReduceLROnPlateau second("val_loss", 0.5, 2, 0.0, 1);
    second.set_context(nullptr, &sgd);
    second.load_state(stored(first));
    second.on_train_begin();
    for (int e = split; e < 10; ++e) {
      second.on_epoch_end(e, {{"val_loss", kScores[static_cast<size_t>(e)]}});
      got.push_back(sgd.param_groups()[0].lr());
    }
    EXPECT_EQ(got, expected) << "split after epoch " << split;
    EXPECT_EQ(second.reductions(), whole.reductions());
  }
}

TEST(CallbackState, ModelCheckpointResumedKeepsTheBestAcrossProcesses) {
  test::TempDir dir;
  auto model = std::make_shared<nn::Linear>(2, 2);
  const std::string path = dir / "best.safetensors";
  ModelCheckpoint first(path, "val_loss", /*save_best_only=*/true);
  first.set_context(model.get(), nullptr);
  drive(first, kScores, 0, 5);       // best 0.7 at epoch 4
  EXPECT_EQ(first.save_count(), 3);  // 1.0, 0.8, 0.7
  ModelCheckpoint second(path, "val_loss", true);
  second.set_context(model.get(), nullptr);
  second.load_state(stored(first));
  drive(second, kScores, 5, 10);  // 0.75 ... 0.79: none beats 0.7
  EXPECT_EQ(second.save_count(), 0);
  EXPECT_DOUBLE_EQ(second.best(), 0.7);
}

TEST(CallbackState, BadStatesAreErrorsNamingTheCallback) {
  EarlyStopping early;
  expect_error([&] { early.load_state(nlohmann::json::array()); },
               {"[EarlyStopping]", "expected a state object"});
  expect_error(
      [&] {
        early.load_state(nlohmann::json{{"wait", 1}});
      },
      {"[EarlyStopping]", "\"has_best\""});
  ModelCheckpoint checkpoint("x.safetensors");
  expect_error(
      [&] {
        checkpoint.load_state(nlohmann::json{{"best", 1.0}});
      },
      {"[ModelCheckpoint]", "\"has_best\""});
  ReduceLROnPlateau plateau;
  expect_error([&] { plateau.load_state(nlohmann::json("x")); },
               {"[ReduceLROnPlateau]", "expected a state object"});
  EXPECT_TRUE(Callback().state().is_null());
}

// --- what fit tells callbacks ------------------------------------------------------------------

struct Recorder final : Callback {
  std::vector<Logs> batches;
  int64_t validation_rows = 0;
  int64_t validation_batches = 0;
  bool on_batch_end(int64_t, const Logs& logs) override {
    batches.push_back(logs);
    return false;
  }
  void on_validation_batch_end(const Tensor& logits, const Tensor& target) override {
    EXPECT_EQ(logits.size(0), target.size(0));
    EXPECT_EQ(logits.dim(), 2);
    validation_rows += logits.size(0);
    ++validation_batches;
  }
};

TEST(CallbackState, FitReportsLrPerStepAndPerEpochAndShowsValidationBatches) {
  manual_seed(3);
  auto model = std::make_shared<nn::Linear>(2, 2);
  optim::SGD sgd(model->parameters(), optim::SGDOptions{.lr = 0.25});
  Trainer trainer(*model, sgd, [](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); },
                  {"accuracy"});
  auto recorder = std::make_shared<Recorder>();
  trainer.add_callback(recorder);
  // Halves the lr before each epoch: the epoch's logs and its steps report the halved value.
  trainer.add_callback(
      std::make_shared<LearningRateScheduler>([](int, double lr) { return lr / 2; }, nullptr));
  data::DataLoader train(test::separable(40, 1), {.batch_size = 16});
  data::DataLoader val(test::separable(20, 2), {.batch_size = 8});
  std::ostringstream out;
  const History h =
      trainer.fit(train, FitOptions{.epochs = 2, .validation = &val, .out = &out, .log_lr = true});
  ASSERT_EQ(h.metrics.at("lr").size(), 2u);
  EXPECT_DOUBLE_EQ(h.metrics.at("lr")[0], 0.125);
  EXPECT_DOUBLE_EQ(h.metrics.at("lr")[1], 0.0625);
  ASSERT_EQ(recorder->batches.size(), 6u);  // 3 batches (16, 16, 8) per epoch
  EXPECT_DOUBLE_EQ(recorder->batches[0].at("lr"), 0.125);
  EXPECT_DOUBLE_EQ(recorder->batches[5].at("lr"), 0.0625);
  EXPECT_DOUBLE_EQ(recorder->batches[1].at("size"), 16.0);
  EXPECT_DOUBLE_EQ(recorder->batches[2].at("size"), 8.0);
  EXPECT_EQ(recorder->validation_rows, 40);  // 20 validation samples, twice
  EXPECT_EQ(recorder->validation_batches, 6);
  EXPECT_NE(out.str().find("lr: 0.125"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("lr: 0.0625"), std::string::npos) << out.str();
}

TEST(CallbackState, EvaluateAloneDoesNotCallValidationHooks) {
  auto model = std::make_shared<nn::Linear>(2, 2);
  optim::SGD sgd(model->parameters(), optim::SGDOptions{.lr = 0.1});
  Trainer trainer(*model, sgd,
                  [](const Tensor& l, const Tensor& t) { return cross_entropy(l, t); });
  auto recorder = std::make_shared<Recorder>();
  trainer.add_callback(recorder);
  data::DataLoader val(test::separable(20, 2), {.batch_size = 8});
  trainer.evaluate(val);
  EXPECT_EQ(recorder->validation_batches, 0);
}

}  // namespace
}  // namespace kiln::train
