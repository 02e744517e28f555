#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/rng.h"
#include "kiln/data/dataset.h"
#include "kiln/data/loader.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/loss.h"
#include "kiln/optim/adam.h"
#include "kiln/train/fit.h"
#include "tests/support/toy_data.h"

namespace kiln::train {
namespace {

using test::separable;

struct Rig {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> optimizer;
  Trainer trainer;

  explicit Rig(const std::vector<std::string>& metrics = {"accuracy"}) {
    kiln::manual_seed(7);
    model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 16),
                                             std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Linear>(16, 2));
    optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.05});
    trainer.compile(
        *model, *optimizer,
        [](const Tensor& logits, const Tensor& target) { return cross_entropy(logits, target); },
        metrics);
  }
};

data::DataLoader loader(std::shared_ptr<data::TensorDataset> ds, int64_t batch, bool shuffle) {
  return data::DataLoader(
      ds, data::DataLoaderOptions{.batch_size = batch, .shuffle = shuffle, .seed = 1});
}

TEST(Fit, LearnsSeparableDataWithHistory) {
  Rig s;
  auto train_loader = loader(separable(256, 1), 32, true);
  auto val_loader = loader(separable(128, 2), 50, false);
  const History history = s.trainer.fit(train_loader, 4, &val_loader, std::cout, false);

  EXPECT_EQ(history.epochs(), 4);
  for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
    ASSERT_TRUE(history.metrics.count(key)) << key;
    EXPECT_EQ(history.metrics.at(key).size(), 4u) << key;
  }
  EXPECT_EQ(history.metrics.size(), 4u);
  EXPECT_GT(history.metrics.at("val_accuracy").back(), 0.95);
  EXPECT_GT(history.metrics.at("accuracy").back(), 0.95);
  EXPECT_LT(history.metrics.at("loss").back(), history.metrics.at("loss").front());
  EXPECT_TRUE(s.model->is_training());  // fit restores the mode it found
}

TEST(Fit, EvaluateAndPredictMatchManualComputation) {
  Rig s;
  auto train_loader = loader(separable(256, 1), 32, true);
  s.trainer.fit(train_loader, 1, nullptr, std::cout, false);

  auto ds = separable(100, 3);
  auto eval_loader = loader(ds, 32, false);  // uneven last batch: weighting matters
  const Logs logs = s.trainer.evaluate(eval_loader);

  NoGradGuard no_grad;
  const Tensor logits = (*s.model)(ds->data());
  const double loss = cross_entropy(logits, ds->target()).item();
  const auto values = logits.to_vector<float>();
  const auto labels = ds->target().to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i)
    correct += (values[2 * i + 1] > values[2 * i] ? 1 : 0) == labels[i];
  EXPECT_NEAR(logs.at("loss"), loss, 1e-5);
  EXPECT_DOUBLE_EQ(logs.at("accuracy"), static_cast<double>(correct) / 100.0);

  const Tensor predicted = s.trainer.predict(eval_loader);
  ASSERT_EQ(predicted.shape(), (Shape{100, 2}));
  const auto p = predicted.to_vector<float>();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], values[i], 1e-6);
}

TEST(Fit, RegularizationTermsJoinTheTrainingAndEvaluationLoss) {
  Rig s;
  s.model->add_regularizer("0.weight", nn::l2(0.1));
  auto ds = separable(64, 5);
  auto eval_loader = loader(ds, 64, false);
  const Logs logs = s.trainer.evaluate(eval_loader);
  {
    NoGradGuard no_grad;
    const double plain = cross_entropy((*s.model)(ds->data()), ds->target()).item();
    double penalty = 0.0;
    for (float w : s.model->state_dict()[0].second.to_vector<float>()) penalty += 0.1 * w * w;
    EXPECT_GT(penalty, 1e-3);
    EXPECT_NEAR(logs.at("loss"), plain + penalty, 1e-5);
  }

  // Training shrinks the regularized weight more than the same training without the term.
  Rig free;
  auto train_a = loader(separable(256, 1), 32, true), train_b = loader(separable(256, 1), 32, true);
  s.trainer.fit(train_a, 3, nullptr, std::cout, false);
  free.trainer.fit(train_b, 3, nullptr, std::cout, false);
  auto norm = [](const Rig& r) {
    double n = 0.0;
    for (float w : r.model->state_dict()[0].second.to_vector<float>()) n += w * w;
    return n;
  };
  EXPECT_LT(norm(s), norm(free));
}

TEST(Fit, VerboseOutputHasEpochsAndBars) {
  Rig s;
  double now = 0.0;
  s.trainer.set_clock([&] { return now += 0.5; });
  auto train_loader = loader(separable(64, 1), 16, false);
  auto val_loader = loader(separable(32, 2), 16, false);
  std::ostringstream out;
  s.trainer.fit(train_loader, 2, &val_loader, out, true, false);
  const std::string text = out.str();
  EXPECT_NE(text.find("Epoch 1/2\n1/4 ["), std::string::npos) << text;
  EXPECT_NE(text.find("Epoch 2/2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("4/4 [==============================] - "), std::string::npos) << text;
  EXPECT_NE(text.find(" - val_accuracy: "), std::string::npos) << text;
  EXPECT_NE(text.find(" samples/s"), std::string::npos) << text;
}

TEST(Fit, EarlyStoppingRules) {
  EarlyStopping stop("val_loss", /*patience=*/2);
  stop.on_train_begin();
  EXPECT_FALSE(stop.on_epoch_end(0, {{"val_loss", 1.0}}));
  EXPECT_FALSE(stop.on_epoch_end(1, {{"val_loss", 0.9}}));
  EXPECT_FALSE(stop.on_epoch_end(2, {{"val_loss", 0.95}}));
  EXPECT_TRUE(stop.on_epoch_end(3, {{"val_loss", 0.96}}));
  EXPECT_EQ(stop.stopped_epoch(), 3);
  EXPECT_DOUBLE_EQ(stop.best(), 0.9);

  EarlyStopping first("val_loss", /*patience=*/1);  // Keras: patience 1 stops at once
  EXPECT_FALSE(first.on_epoch_end(0, {{"val_loss", 1.0}}));
  EXPECT_TRUE(first.on_epoch_end(1, {{"val_loss", 1.5}}));

  EarlyStopping acc("val_accuracy", 0, 0.01);  // auto mode maximizes accuracy
  EXPECT_FALSE(acc.on_epoch_end(0, {{"val_accuracy", 0.5}}));
  EXPECT_FALSE(acc.on_epoch_end(1, {{"val_accuracy", 0.6}}));
  EXPECT_TRUE(acc.on_epoch_end(2, {{"val_accuracy", 0.605}}));  // within min_delta

  try {
    EarlyStopping missing("val_f1");
    missing.on_epoch_end(0, {{"loss", 1.0}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[EarlyStopping]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("loss"), std::string::npos) << e.what();
  }
  EXPECT_THROW(EarlyStopping("loss", 0, 0, "sideways"), Error);
}

TEST(Fit, EarlyStoppingEndsFit) {
  Rig s;
  auto stop = std::make_shared<EarlyStopping>("loss", 0, /*min_delta=*/1e9);
  s.trainer.add_callback(stop);
  auto train_loader = loader(separable(64, 1), 32, false);
  const History history = s.trainer.fit(train_loader, 10, nullptr, std::cout, false);
  EXPECT_EQ(history.epochs(), 2);
  EXPECT_EQ(stop->stopped_epoch(), 1);
}

std::vector<std::vector<float>> weights(const nn::Module& model) {
  std::vector<std::vector<float>> w;
  for (const auto& [name, t] : model.state_dict()) w.push_back(t.to_vector<float>());
  return w;
}

TEST(Fit, InitialEpochResumesNumberingAndShuffles) {
  Rig straight;
  auto straight_loader = loader(separable(96, 1), 16, true);
  const History full =
      straight.trainer.fit(straight_loader, FitOptions{.epochs = 4, .verbose = false});
  EXPECT_EQ(full.epoch, (std::vector<int>{0, 1, 2, 3}));

  Rig resumed;
  auto first_loader = loader(separable(96, 1), 16, true);
  resumed.trainer.fit(first_loader, FitOptions{.epochs = 2, .verbose = false});
  std::vector<int> seen;
  resumed.trainer.add_callback(std::make_shared<LambdaCallback>(
      LambdaHooks{.on_epoch_begin = [&](int epoch) { seen.push_back(epoch); }}));
  auto fresh_loader = loader(separable(96, 1), 16, true);  // its own epoch counter is 0
  std::ostringstream out;
  const History rest =
      resumed.trainer.fit(fresh_loader, FitOptions{.epochs = 4, .initial_epoch = 2, .out = &out});
  EXPECT_EQ(seen, (std::vector<int>{2, 3}));
  EXPECT_EQ(rest.epoch, (std::vector<int>{2, 3}));
  EXPECT_EQ(rest.epochs(), 2);
  EXPECT_EQ(out.str().find("Epoch 1/4"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("Epoch 3/4\n"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("Epoch 4/4\n"), std::string::npos) << out.str();
  // Epochs 2 and 3 saw the same shuffles as in the uninterrupted run, so the weights agree.
  EXPECT_EQ(weights(*resumed.model), weights(*straight.model));
  EXPECT_EQ(rest.metrics.at("loss"),
            (std::vector<double>{full.metrics.at("loss")[2], full.metrics.at("loss")[3]}));

  // Nothing left to run is not an error.
  EXPECT_EQ(resumed.trainer
                .fit(fresh_loader, FitOptions{.epochs = 4, .initial_epoch = 4, .verbose = false})
                .epochs(),
            0);
}

TEST(Fit, FitOptionsErrors) {
  Rig s;
  auto train_loader = loader(separable(8, 1), 4, false);
  for (int initial : {-1, 3}) {
    try {
      s.trainer.fit(train_loader, FitOptions{.epochs = 2, .initial_epoch = initial});
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[fit]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("initial_epoch"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("test_fit.cpp"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(s.trainer.fit(train_loader, FitOptions{.epochs = 1, .out = nullptr}), Error);
}

TEST(Fit, EarlyStoppingEndsFitAndIsReported) {
  Rig s;
  s.trainer.add_callback(std::make_shared<EarlyStopping>("loss", 0, /*min_delta=*/1e9));
  auto train_loader = loader(separable(64, 1), 32, false);
  std::ostringstream out;
  const History history = s.trainer.fit(train_loader, 10, nullptr, out, true);
  EXPECT_EQ(history.stopped_epoch, 1);
  EXPECT_NE(history.stop_reason.find("EarlyStopping: loss did not improve for 1 epoch(s)"),
            std::string::npos)
      << history.stop_reason;
  EXPECT_NE(out.str().find("Stopped after epoch 2: EarlyStopping"), std::string::npos) << out.str();
}

TEST(Fit, LambdaCallbackSeesEveryHookInOrder) {
  Rig rig;
  std::vector<std::string> events;
  rig.trainer.add_callback(std::make_shared<LambdaCallback>(LambdaHooks{
      .on_train_begin = [&] { events.push_back("train_begin"); },
      .on_train_end =
          [&](const Logs& logs) { events.push_back("train_end:" + std::to_string(logs.size())); },
      .on_epoch_begin = [&](int e) { events.push_back("epoch_begin:" + std::to_string(e)); },
      .update_logs = [&](int e, Logs&) { events.push_back("logs:" + std::to_string(e)); },
      .on_epoch_end =
          [&](int e, const Logs& logs) {
            events.push_back("epoch_end:" + std::to_string(e) + ":" +
                             std::to_string(logs.count("val_loss")));
            return false;
          },
      .on_batch_end =
          [&](int64_t b, const Logs& logs) {
            events.push_back("batch:" + std::to_string(b) + ":" + std::to_string(logs.size()));
            return false;
          }}));
  rig.trainer.add_callback(std::make_shared<LambdaCallback>(LambdaHooks{}));  // all empty
  auto train = loader(separable(32, 1), 16, true);
  auto val = loader(separable(16, 2), 16, false);
  rig.trainer.fit(train, 2, &val, std::cout, false);
  const std::vector<std::string> expected = {
      "train_begin",   "epoch_begin:0", "batch:0:3", "batch:1:3", "logs:0",        "epoch_end:0:1",
      "epoch_begin:1", "batch:0:3",     "batch:1:3", "logs:1",    "epoch_end:1:1", "train_end:4"};
  EXPECT_EQ(events, expected);
}

TEST(Fit, BatchStopEndsTheEpochEarlyButCompletesIt) {
  Rig rig;
  int64_t batches = 0;
  bool epoch_end_seen = false;
  rig.trainer.add_callback(
      std::make_shared<LambdaCallback>(LambdaHooks{.on_epoch_end =
                                                       [&](int, const Logs&) {
                                                         epoch_end_seen = true;
                                                         return false;
                                                       },
                                                   .on_batch_end =
                                                       [&](int64_t b, const Logs&) {
                                                         ++batches;
                                                         return b == 1;
                                                       }}));
  auto train = loader(separable(64, 1), 16, true);
  auto val = loader(separable(16, 2), 16, false);
  std::ostringstream out;
  const History history =
      rig.trainer.fit(train, FitOptions{.epochs = 3, .validation = &val, .out = &out});
  EXPECT_EQ(batches, 2);
  EXPECT_TRUE(epoch_end_seen);
  EXPECT_EQ(history.epochs(), 1);
  EXPECT_EQ(history.metrics.count("val_loss"), 1u);
  EXPECT_EQ(history.stop_reason, "LambdaCallback stopped training");
  EXPECT_NE(out.str().find("Stopped after epoch 1: LambdaCallback stopped training\n"),
            std::string::npos)
      << out.str();
}

TEST(Fit, Errors) {
  Trainer trainer;
  auto train_loader = loader(separable(8, 1), 4, false);
  try {
    trainer.fit(train_loader, 1, nullptr, std::cout, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[fit]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_fit.cpp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Rig(std::vector<std::string>{"auc"}), Error);
}

}  // namespace
}  // namespace kiln::train
