#pragma once
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/loader.h"
#include "kiln/nn/module.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/metrics.h"
#include "kiln/train/progress.h"

namespace kiln::train {

// One value per metric name ("loss", "accuracy", "val_loss", ...).
using Logs = std::map<std::string, double>;
// Maps (logits, target) to a scalar loss, e.g. a lambda around kiln::cross_entropy.
using LossFn = std::function<Tensor(const Tensor& logits, const Tensor& target)>;

// Per-epoch values of every reported metric, in epoch order (Keras' History.history).
struct History {
  std::map<std::string, std::vector<double>> metrics;
  int64_t epochs() const;
};

// Hooks into fit(). Only epoch ends exist so far; batch-level hooks can follow.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin() {}
  // `epoch` counts from 0; returning true stops training after this epoch.
  virtual bool on_epoch_end(int epoch, const Logs& logs) = 0;
};

// Stops when `monitor` has not improved by more than min_delta for `patience` consecutive
// epochs (Keras semantics). mode "auto" maximizes metrics whose name contains "acc", "f1",
// "precision" or "recall" and minimizes the others; "min" / "max" force it. A monitor missing
// from the logs is an Error naming the available keys.
class EarlyStopping final : public Callback {
 public:
  explicit EarlyStopping(std::string monitor = "val_loss", int patience = 0, double min_delta = 0.0,
                         std::string mode = "auto", const Loc& loc = Loc::current());
  void on_train_begin() override;
  bool on_epoch_end(int epoch, const Logs& logs) override;
  // The epoch (from 0) at which training was stopped, or -1.
  int stopped_epoch() const { return stopped_epoch_; }
  double best() const { return best_; }

 private:
  std::string monitor_;
  int patience_;
  double min_delta_;
  bool maximize_;
  int wait_ = 0;
  int stopped_epoch_ = -1;
  double best_ = 0.0;
  bool has_best_ = false;
  Loc loc_;
};

// Note [trainer]
// ~~~~~~~~~~~~~~
// Keras' compile/fit/evaluate/predict over a kiln model. A training step is
// zero_grad, forward (model.train()), loss, backward, optimizer.step(); metrics read the detached
// logits. The reported loss is the batch-size-weighted mean of the batch losses, which for a
// mean-reduced loss equals the loss over the whole epoch's samples. Validation and evaluate run
// with model.eval() under NoGradGuard and restore the model's previous mode. Batches must carry
// targets (Example::target) for fit and evaluate.
class Trainer {
 public:
  Trainer() = default;
  Trainer(nn::Module& model, optim::Optimizer& optimizer, LossFn loss,
          const std::vector<std::string>& metrics = {}, const Loc& loc = Loc::current());

  // Metric names as make_metric takes them; the reported key is the metric's name().
  void compile(nn::Module& model, optim::Optimizer& optimizer, LossFn loss,
               const std::vector<std::string>& metrics = {}, const Loc& loc = Loc::current());

  // With verbose, prints "Epoch i/n" and a progress bar per epoch to `out`; is_tty selects
  // carriage-return redraws (see Note [progress output]).
  History fit(data::DataLoader& train, int epochs, data::DataLoader* validation = nullptr,
              std::ostream& out = std::cout, bool verbose = true, bool is_tty = false,
              const Loc& loc = Loc::current());
  // "loss" and every metric over the loader.
  Logs evaluate(data::DataLoader& loader, const Loc& loc = Loc::current());
  // The model's outputs for every batch, concatenated along dim 0 (undefined for no batches).
  Tensor predict(data::DataLoader& loader, const Loc& loc = Loc::current());

  void add_callback(std::shared_ptr<Callback> callback) {
    callbacks_.push_back(std::move(callback));
  }
  // Replaces the progress bar's clock (tests make the output deterministic with it).
  void set_clock(Clock clock) { clock_ = std::move(clock); }

 private:
  void check_compiled(const char* op, const Loc& loc) const;

  nn::Module* model_ = nullptr;
  optim::Optimizer* optimizer_ = nullptr;
  LossFn loss_;
  std::vector<std::unique_ptr<Metric>> metrics_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  Clock clock_ = steady_seconds;
};

}  // namespace kiln::train
