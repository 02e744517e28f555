#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/rng.h"
#include "kiln/data/dataset.h"
#include "kiln/data/loader.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/loss.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/sgd.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/fit.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_util.h"
#include "tests/support/toy_data.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

using test::expect_error;
using test::separable;

data::DataLoader loader(int64_t n, int64_t batch, uint32_t seed = 1, bool shuffle = true) {
  return data::DataLoader(
      separable(n, seed),
      data::DataLoaderOptions{.batch_size = batch, .shuffle = shuffle, .seed = 1});
}

std::shared_ptr<nn::Sequential> make_model(uint64_t seed) {
  kiln::manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 16),
                                          std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 2));
}

Tensor ce(const Tensor& logits, const Tensor& target) {
  return cross_entropy(logits, target);
}

struct Rig {
  std::shared_ptr<nn::Sequential> model = make_model(7);
  std::unique_ptr<optim::Adam> optimizer =
      std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.05});
  Trainer trainer;
  explicit Rig(LossFn loss = ce) {
    trainer.compile(*model, *optimizer, std::move(loss), {"accuracy"});
  }
  History fit(data::DataLoader& train, int epochs, data::DataLoader* val = nullptr) {
    return trainer.fit(train, FitOptions{.epochs = epochs, .validation = val, .verbose = false});
  }
};

using Weights = std::vector<std::vector<float>>;
Weights weights(const nn::Module& model) {
  Weights w;
  for (const auto& [name, t] : model.state_dict()) w.push_back(t.to_vector<float>());
  return w;
}

// A callback that injects a scripted "score" into the epoch logs and records the weights at
// every epoch end (added before the callback under test, so it sees them first).
std::shared_ptr<LambdaCallback> scripted_score(std::vector<double> scores,
                                               std::vector<Weights>* snapshots, Rig& rig) {
  return std::make_shared<LambdaCallback>(LambdaHooks{
      .update_logs = [scores](int epoch, Logs& logs) { logs["score"] = scores.at(epoch); },
      .on_epoch_end =
          [snapshots, &rig](int, const Logs&) {
            if (snapshots) snapshots->push_back(weights(*rig.model));
            return false;
          }});
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --- Context -----------------------------------------------------------------------------------

TEST(Callbacks, ContextIsSetByFitAndMissingContextIsAnError) {
  Rig rig;
  nn::Module* seen_model = nullptr;
  optim::Optimizer* seen_optimizer = nullptr;
  struct Probe final : Callback {
    nn::Module** m;
    optim::Optimizer** o;
    Probe(nn::Module** m, optim::Optimizer** o) : m(m), o(o) {}
    std::string name() const override { return "Probe"; }
    void on_train_begin() override { *m = &model(), *o = &optimizer(); }
  };
  rig.trainer.add_callback(std::make_shared<Probe>(&seen_model, &seen_optimizer));
  auto train = loader(32, 16);
  rig.fit(train, 1);
  EXPECT_EQ(seen_model, rig.model.get());
  EXPECT_EQ(seen_optimizer, rig.optimizer.get());

  Probe alone(&seen_model, &seen_optimizer);
  expect_error([&] { alone.model(); }, {"[Probe]", "not attached", "test_callbacks.cpp"});
  expect_error([&] { alone.optimizer(); }, {"[Probe]", "optimizer", "test_callbacks.cpp"});
}

// --- EarlyStopping -----------------------------------------------------------------------------

TEST(Callbacks, EarlyStoppingRestoresTheExactBestWeightsWhenStopping) {
  Rig rig;
  std::vector<Weights> snapshots;
  rig.trainer.add_callback(scripted_score({3.0, 1.0, 2.0, 2.5, 0.5, 0.1}, &snapshots, rig));
  auto stop = std::make_shared<EarlyStopping>("score", /*patience=*/2, 0.0, "min",
                                              /*restore_best_weights=*/true);
  rig.trainer.add_callback(stop);
  auto train = loader(64, 16);
  const History history = rig.fit(train, 6);
  EXPECT_EQ(history.epochs(), 4);
  EXPECT_EQ(stop->stopped_epoch(), 3);
  EXPECT_EQ(stop->best_epoch(), 1);
  EXPECT_TRUE(stop->restored());
  ASSERT_EQ(snapshots.size(), 4u);
  EXPECT_NE(snapshots[1], snapshots[3]);  // training moved on after the best epoch
  EXPECT_EQ(weights(*rig.model), snapshots[1]);
  EXPECT_EQ(history.stopped_epoch, 3);
  EXPECT_NE(history.stop_reason.find("EarlyStopping: score did not improve"), std::string::npos)
      << history.stop_reason;
  EXPECT_NE(history.stop_reason.find("restored the weights of epoch 2"), std::string::npos)
      << history.stop_reason;
}

TEST(Callbacks, EarlyStoppingRestoresAtTrainEndOnlyWhenTheBestWasNotLast) {
  for (bool best_is_last : {false, true}) {
    Rig rig;
    std::vector<Weights> snapshots;
    const std::vector<double> scores =
        best_is_last ? std::vector<double>{3.0, 2.0, 1.0} : std::vector<double>{3.0, 1.0, 2.0};
    rig.trainer.add_callback(scripted_score(scores, &snapshots, rig));
    auto stop = std::make_shared<EarlyStopping>("score", 5, 0.0, "auto", true);
    rig.trainer.add_callback(stop);
    auto train = loader(64, 16);
    const History history = rig.fit(train, 3);
    EXPECT_EQ(history.epochs(), 3);
    EXPECT_EQ(history.stopped_epoch, -1);
    EXPECT_EQ(stop->stopped_epoch(), -1);
    EXPECT_EQ(stop->restored(), !best_is_last);
    EXPECT_EQ(weights(*rig.model), snapshots[best_is_last ? 2 : 1]);
  }
}

TEST(Callbacks, EarlyStoppingArgumentErrors) {
  expect_error([] { EarlyStopping("val_loss", -1); },
               {"[EarlyStopping]", "patience >= 0", "-1", "test_callbacks.cpp"});
  expect_error([] { EarlyStopping("val_loss", 0, -0.5); },
               {"[EarlyStopping]", "min_delta", "test_callbacks.cpp"});
  expect_error([] { EarlyStopping("", 0); }, {"[EarlyStopping]", "monitor", "test_callbacks.cpp"});
  EarlyStopping unattached("loss", 0, 0.0, "auto", /*restore_best_weights=*/true);
  expect_error(
      [&] {
        unattached.on_epoch_end(0, {{"loss", 1.0}});
      },
      {"[EarlyStopping]", "not attached", "test_callbacks.cpp"});
}

// --- ModelCheckpoint ---------------------------------------------------------------------------

TEST(Callbacks, ModelCheckpointBestOnlySavesOnImprovementAndLoadsBack) {
  test::TempDir dir("callbacks");
  Rig rig;
  std::vector<Weights> snapshots;
  rig.trainer.add_callback(scripted_score({3.0, 1.0, 2.0, 0.5}, &snapshots, rig));
  auto checkpoint = std::make_shared<ModelCheckpoint>(dir / "ckpt-{epoch}.safetensors", "score",
                                                      /*save_best_only=*/true);
  rig.trainer.add_callback(checkpoint);
  auto train = loader(64, 16);
  rig.fit(train, 4);

  EXPECT_TRUE(fs::exists(dir / "ckpt-01.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "ckpt-02.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "ckpt-03.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "ckpt-04.safetensors"));
  EXPECT_EQ(checkpoint->save_count(), 3);
  EXPECT_EQ(checkpoint->last_saved_path(), dir / "ckpt-04.safetensors");
  EXPECT_DOUBLE_EQ(checkpoint->best(), 0.5);

  // The epoch-2 file holds exactly the weights at the end of epoch 2.
  const io::SafetensorsFile file = io::load_safetensors(dir / "ckpt-02.safetensors");
  EXPECT_EQ(file.metadata.at("epoch"), "2");
  EXPECT_EQ(file.metadata.at("score"), "1");
  auto fresh = make_model(99);
  EXPECT_NE(weights(*fresh), snapshots[1]);
  fresh->load_state_dict(file.tensors);
  EXPECT_EQ(weights(*fresh), snapshots[1]);
}

TEST(Callbacks, ModelCheckpointEveryEpochWithMetricPlaceholders) {
  test::TempDir dir("callbacks");
  Rig rig;
  rig.trainer.add_callback(scripted_score({0.25, 0.125}, nullptr, rig));
  auto checkpoint =
      std::make_shared<ModelCheckpoint>(dir / "m{{x}}-{epoch:03d}-{score:.3f}.safetensors");
  rig.trainer.add_callback(checkpoint);
  auto train = loader(32, 16);
  auto val = loader(32, 16, 2, false);
  rig.fit(train, 2, &val);
  EXPECT_TRUE(fs::exists(dir / "m{x}-001-0.250.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "m{x}-002-0.125.safetensors"));
  EXPECT_EQ(checkpoint->save_count(), 2);
  EXPECT_EQ(checkpoint->format_path(9, {{"score", 1.0}}), dir / "m{x}-010-1.000.safetensors");
  const io::SafetensorsFile file = io::load_safetensors(checkpoint->last_saved_path());
  EXPECT_EQ(weights(*rig.model).size(), file.tensors.size());
}

TEST(Callbacks, ModelCheckpointErrors) {
  expect_error([] { ModelCheckpoint(""); }, {"[ModelCheckpoint]", "test_callbacks.cpp"});
  expect_error([] { ModelCheckpoint("m-{epoch.safetensors"); },
               {"[ModelCheckpoint]", "malformed", "offset 2", "test_callbacks.cpp"});
  expect_error([] { ModelCheckpoint("m-}.safetensors"); },
               {"[ModelCheckpoint]", "offset 2", "test_callbacks.cpp"});
  expect_error([] { ModelCheckpoint("m-{epoch:.4f}"); },
               {"[ModelCheckpoint]", "format spec", ".4f", "test_callbacks.cpp"});
  expect_error([] { ModelCheckpoint("m", "val_loss", true, "best"); },
               {"[ModelCheckpoint]", "\"best\"", "test_callbacks.cpp"});

  Rig rig;
  test::TempDir dir("callbacks");
  ModelCheckpoint best_only(dir / "m.safetensors", "val_loss", true);
  best_only.set_context(rig.model.get(), rig.optimizer.get());
  expect_error(
      [&] {
        best_only.on_epoch_end(0, {{"loss", 1.0}});
      },
      {"[ModelCheckpoint]", "val_loss", "loss", "test_callbacks.cpp"});
  ModelCheckpoint unknown(dir / "m-{acc}.safetensors");
  unknown.set_context(rig.model.get(), rig.optimizer.get());
  expect_error(
      [&] {
        unknown.on_epoch_end(0, {{"loss", 1.0}});
      },
      {"[ModelCheckpoint]", "\"acc\"", "test_callbacks.cpp"});
  const std::string missing_dir = dir / "no/such/dir/m.safetensors";
  ModelCheckpoint unwritable(missing_dir);
  unwritable.set_context(rig.model.get(), rig.optimizer.get());
  expect_error(
      [&] {
        unwritable.on_epoch_end(0, {{"loss", 1.0}});
      },
      {"[ModelCheckpoint]", missing_dir, "epoch 1", "test_callbacks.cpp"});
}

// --- ReduceLROnPlateau -------------------------------------------------------------------------

// Keras' ReduceLROnPlateau.on_epoch_end (mode "min"), transcribed.
struct KerasPlateau {
  double factor, min_delta, min_lr, lr;
  int patience, cooldown;
  double best = std::numeric_limits<double>::infinity();
  int wait = 0, cooldown_counter = 0;
  void step(double current) {
    if (cooldown_counter > 0) --cooldown_counter, wait = 0;
    if (current < best - min_delta) {
      best = current, wait = 0;
    } else if (cooldown_counter == 0) {
      if (++wait >= patience && lr > min_lr) {
        lr = std::max(lr * factor, min_lr);
        cooldown_counter = cooldown, wait = 0;
      }
    }
  }
};

TEST(Callbacks, ReduceLROnPlateauMatchesKeras) {
  nn::Linear layer(2, 2);
  std::mt19937 gen(3);
  for (int patience : {0, 1, 2, 3})
    for (int cooldown : {0, 1, 2, 4})
      for (double min_lr : {0.0, 1e-3}) {
        optim::SGD sgd(layer.parameters(), optim::SGDOptions{.lr = 0.1});
        ReduceLROnPlateau plateau("val_loss", 0.5, patience, 0.05, cooldown, min_lr);
        plateau.set_context(nullptr, &sgd);
        plateau.on_train_begin();
        KerasPlateau keras{0.5, 0.05, min_lr, 0.1, patience, cooldown};
        double value = 1.0;
        for (int epoch = 0; epoch < 60; ++epoch) {
          value += std::uniform_int_distribution<int>(-2, 1)(gen) * 0.03;  // plateaus and ties
          plateau.on_epoch_end(epoch, {{"val_loss", value}});
          keras.step(value);
          ASSERT_DOUBLE_EQ(sgd.param_groups()[0].lr(), keras.lr)
              << "patience " << patience << " cooldown " << cooldown << " epoch " << epoch;
        }
      }
}

TEST(Callbacks, ReduceLROnPlateauPatienceCooldownAndMinLr) {
  nn::Linear layer(2, 2);
  optim::SGD sgd(layer.parameters(), optim::SGDOptions{.lr = 1.0});
  std::ostringstream messages;
  ReduceLROnPlateau plateau("val_accuracy", 0.5, /*patience=*/2, 0.0, /*cooldown=*/3,
                            /*min_lr=*/0.2, "auto", &messages);
  plateau.set_context(nullptr, &sgd);
  plateau.on_train_begin();
  // auto mode maximizes accuracy: 0.5 is the best, every later epoch is flat.
  // Lowered at the 2nd bad epoch; the 3-epoch cooldown's last epoch already counts (Keras).
  const std::vector<double> expected = {1.0,  1.0,  0.5,  0.5,  0.5, 0.5,
                                        0.25, 0.25, 0.25, 0.25, 0.2, 0.2};
  for (int epoch = 0; epoch < static_cast<int>(expected.size()); ++epoch) {
    Logs logs{{"val_accuracy", epoch == 0 ? 0.5 : 0.4}};
    plateau.update_logs(epoch, logs);
    plateau.on_epoch_end(epoch, logs);
    EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr(), expected[epoch]) << "epoch " << epoch;
  }
  EXPECT_EQ(plateau.reductions(), 3);
  EXPECT_DOUBLE_EQ(plateau.best(), 0.5);
  EXPECT_NE(messages.str().find("Epoch 3: ReduceLROnPlateau reducing learning rate to 0.5."),
            std::string::npos)
      << messages.str();
}

TEST(Callbacks, ReduceLROnPlateauInFitLogsLr) {
  Rig rig;
  rig.trainer.add_callback(scripted_score({1.0, 1.0, 1.0, 1.0}, nullptr, rig));
  rig.trainer.add_callback(std::make_shared<ReduceLROnPlateau>("score", 0.1, 1));
  auto train = loader(32, 16);
  const History history = rig.fit(train, 4);
  ASSERT_EQ(history.metrics.count("lr"), 1u);
  const auto& lr = history.metrics.at("lr");  // the lr each epoch trained with
  ASSERT_EQ(lr.size(), 4u);
  EXPECT_DOUBLE_EQ(lr[0], 0.05);
  EXPECT_DOUBLE_EQ(lr[1], 0.05);
  EXPECT_NEAR(lr[2], 0.005, 1e-12);
  EXPECT_NEAR(lr[3], 0.0005, 1e-12);
}

TEST(Callbacks, ReduceLROnPlateauArgumentErrors) {
  expect_error([] { ReduceLROnPlateau("val_loss", 1.0); },
               {"[ReduceLROnPlateau]", "factor", "test_callbacks.cpp"});
  expect_error([] { ReduceLROnPlateau("val_loss", 0.1, -1); },
               {"[ReduceLROnPlateau]", "patience", "test_callbacks.cpp"});
  expect_error([] { ReduceLROnPlateau("val_loss", 0.1, 1, 1e-4, -2); },
               {"[ReduceLROnPlateau]", "cooldown", "-2", "test_callbacks.cpp"});
  expect_error([] { ReduceLROnPlateau("val_loss", 0.1, 1, 1e-4, 0, -1.0); },
               {"[ReduceLROnPlateau]", "min_lr", "test_callbacks.cpp"});
  expect_error([] { ReduceLROnPlateau("val_loss", 0.1, 1, 1e-4, 0, 0.0, "up"); },
               {"[ReduceLROnPlateau]", "mode", "test_callbacks.cpp"});
  ReduceLROnPlateau unattached;
  expect_error([&] { unattached.on_train_begin(); },
               {"[ReduceLROnPlateau]", "optimizer", "test_callbacks.cpp"});
}

// --- CSVLogger ---------------------------------------------------------------------------------

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(Callbacks, CSVLoggerWritesHeaderAndRowsAndAppendsOnResume) {
  test::TempDir dir("callbacks");
  const std::string path = dir / "history.csv";
  Rig rig;
  rig.trainer.add_callback(std::make_shared<CSVLogger>(path));
  auto train = loader(64, 16);
  auto val = loader(32, 16, 2, false);
  const History first = rig.fit(train, 2, &val);

  std::vector<std::string> rows = lines(read_text(path));
  ASSERT_EQ(rows.size(), 3u) << read_text(path);
  EXPECT_EQ(rows[0], "epoch,accuracy,loss,val_accuracy,val_loss");
  for (int e = 0; e < 2; ++e) {
    std::istringstream row(rows[e + 1]);
    std::string field;
    std::getline(row, field, ',');
    EXPECT_EQ(field, std::to_string(e));
    for (const char* key : {"accuracy", "loss", "val_accuracy", "val_loss"}) {
      std::getline(row, field, ',');
      EXPECT_EQ(std::stod(field), first.metrics.at(key)[e]) << key;  // round-trip exact
    }
  }

  // A resumed run appends under the same header.
  Rig resumed;
  resumed.trainer.add_callback(std::make_shared<CSVLogger>(path, /*append=*/true));
  resumed.trainer.fit(train, FitOptions{.epochs = 3, .initial_epoch = 2, .verbose = false});
  rows = lines(read_text(path));
  ASSERT_EQ(rows.size(), 4u) << read_text(path);
  EXPECT_EQ(rows[0], "epoch,accuracy,loss,val_accuracy,val_loss");
  EXPECT_EQ(rows[3].substr(0, 2), "2,");
  EXPECT_NE(rows[3].find(",NA,NA"), std::string::npos) << rows[3];  // no validation this time

  // Without append the file starts over.
  Rig again;
  again.trainer.add_callback(std::make_shared<CSVLogger>(path, false, ';'));
  again.fit(train, 1);
  rows = lines(read_text(path));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], "epoch;accuracy;loss");
}

TEST(Callbacks, CSVLoggerErrorsNameThePath) {
  test::TempDir dir("callbacks");
  const std::string bad = dir / "missing/history.csv";
  CSVLogger logger(bad);
  expect_error([&] { logger.on_train_begin(); }, {"[CSVLogger]", bad, "test_callbacks.cpp"});
  expect_error([] { CSVLogger(""); }, {"[CSVLogger]", "test_callbacks.cpp"});
  expect_error([] { CSVLogger("x.csv", false, '"'); }, {"[CSVLogger]", "separator"});
}

// --- LearningRateScheduler ---------------------------------------------------------------------

TEST(Callbacks, LearningRateSchedulerStepsAnLRSchedulerPerEpochOrPerBatch) {
  {
    Rig rig;
    auto step = std::make_shared<optim::StepLR>(*rig.optimizer, 1, 0.5);
    rig.trainer.add_callback(std::make_shared<LearningRateScheduler>(step));
    auto train = loader(32, 16);
    const History history = rig.fit(train, 3);
    EXPECT_EQ(history.metrics.at("lr"), (std::vector<double>{0.05, 0.025, 0.0125}));
    EXPECT_DOUBLE_EQ(rig.optimizer->param_groups()[0].lr(), 0.00625);
  }
  {
    Rig rig;  // two batches per epoch
    auto step = std::make_shared<optim::StepLR>(*rig.optimizer, 1, 0.5);
    rig.trainer.add_callback(std::make_shared<LearningRateScheduler>(step, /*per_batch=*/true));
    auto train = loader(32, 16);
    const History history = rig.fit(train, 2);
    EXPECT_EQ(history.metrics.at("lr"), (std::vector<double>{0.0125, 0.003125}));
  }
}

TEST(Callbacks, LearningRateSchedulerKerasFunction) {
  Rig rig;
  std::ostringstream messages;
  std::vector<std::pair<int, double>> calls;
  rig.trainer.add_callback(std::make_shared<LearningRateScheduler>(
      [&](int epoch, double lr) {
        calls.emplace_back(epoch, lr);
        return epoch < 1 ? lr : lr * 0.1;
      },
      &messages));
  auto train = loader(32, 16);
  const History history =
      rig.trainer.fit(train, FitOptions{.epochs = 4, .initial_epoch = 1, .verbose = false});
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].first, 1);  // absolute epochs
  EXPECT_DOUBLE_EQ(calls[0].second, 0.05);
  const auto& lr = history.metrics.at("lr");
  ASSERT_EQ(lr.size(), 3u);
  EXPECT_NEAR(lr[0], 0.005, 1e-12);
  EXPECT_NEAR(lr[2], 0.00005, 1e-12);
  EXPECT_NE(messages.str().find("Epoch 2: LearningRateScheduler setting learning rate to"),
            std::string::npos)
      << messages.str();

  // Built by std::make_shared, the callback's own line is inside the standard library, so the
  // error points at the fit call instead.
  Rig bad;
  bad.trainer.add_callback(std::make_shared<LearningRateScheduler>(
      [](int, double) { return std::numeric_limits<double>::quiet_NaN(); }));
  expect_error([&] { bad.fit(train, 1); },
               {"[LearningRateScheduler]", "finite lr", "nan", "test_callbacks.cpp"});
  try {
    bad.fit(train, 1);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("stl_construct"), std::string::npos) << e.what();
  }
  expect_error([] { LearningRateScheduler(LearningRateScheduler::Schedule{}); },
               {"[LearningRateScheduler]", "test_callbacks.cpp"});
  expect_error([] { LearningRateScheduler(std::shared_ptr<optim::LRScheduler>{}); },
               {"[LearningRateScheduler]", "null", "test_callbacks.cpp"});
}

// --- TerminateOnNaN ----------------------------------------------------------------------------

TEST(Callbacks, TerminateOnNaNStopsAtTheFirstNaNBatch) {
  int calls = 0;
  Rig rig([&calls](const Tensor& logits, const Tensor& target) {
    const Tensor loss = cross_entropy(logits, target);
    return ++calls == 7 ? loss * std::numeric_limits<double>::quiet_NaN() : loss;
  });
  std::ostringstream notice;
  auto terminate = std::make_shared<TerminateOnNaN>(&notice);
  rig.trainer.add_callback(terminate);
  auto train = loader(64, 16);  // 4 batches per epoch: call 7 is epoch 1, batch 2
  const History history = rig.fit(train, 5);
  EXPECT_EQ(calls, 7);  // no batch after the NaN one
  EXPECT_EQ(history.epochs(), 2);
  EXPECT_TRUE(std::isnan(history.metrics.at("loss")[1]));
  EXPECT_EQ(terminate->terminated_epoch(), 1);
  EXPECT_EQ(terminate->terminated_batch(), 2);
  EXPECT_EQ(history.stopped_epoch, 1);
  EXPECT_EQ(history.stop_reason, "TerminateOnNaN: loss is nan at batch 3 of epoch 2");
  EXPECT_EQ(notice.str(), "Batch 2: Invalid loss, terminating training\n");
}

TEST(Callbacks, TerminateOnNaNCatchesDivergence) {
  Rig rig;
  rig.optimizer->param_groups()[0].set_lr(1e30);  // diverges to inf / nan within a few steps
  auto terminate = std::make_shared<TerminateOnNaN>();
  rig.trainer.add_callback(terminate);
  auto train = loader(64, 8);
  const History history = rig.fit(train, 20);
  EXPECT_GE(terminate->terminated_epoch(), 0);
  EXPECT_LT(history.epochs(), 20);
  EXPECT_NE(history.stop_reason.find("TerminateOnNaN"), std::string::npos);
  TerminateOnNaN alone;
  expect_error(
      [&] {
        alone.on_batch_end(0, {{"acc", 1.0}});
      },
      {"[TerminateOnNaN]", "loss", "acc", "test_callbacks.cpp"});
}

}  // namespace
}  // namespace kiln::train
