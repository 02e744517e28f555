#pragma once
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/loader.h"
#include "kiln/nn/module.h"
#include "kiln/ops/autocast.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/metrics.h"
#include "kiln/train/precision.h"
#include "kiln/train/progress.h"

namespace kiln::train {

// Maps (logits, target) to a scalar loss, e.g. a lambda around kiln::cross_entropy.
using LossFn = std::function<Tensor(const Tensor& logits, const Tensor& target)>;

// Per-epoch values of every reported metric, in epoch order (Keras' History.history).
struct History {
  std::map<std::string, std::vector<double>> metrics;
  // The absolute epoch (from 0) of each entry, as Keras' History.epoch.
  std::vector<int> epoch;
  // Set when a callback stopped training: the epoch (from 0) it stopped after, and why (each
  // stopping callback's stop_reason(), joined by "; ").
  int stopped_epoch = -1;
  std::string stop_reason;
  int64_t epochs() const;
};

// What fit runs. Epochs initial_epoch .. epochs-1 run (absolute numbers, as in Keras), so a fit
// resumed from a checkpoint taken after epoch k passes initial_epoch = k and sees the same
// epoch numbers, loader shuffles and progress headers as an uninterrupted run.
struct FitOptions {
  int epochs = 1;
  int initial_epoch = 0;
  data::DataLoader* validation = nullptr;
  // Receives "Epoch i/n", the progress bars and stop notices when verbose.
  std::ostream* out = &std::cout;
  bool verbose = true;
  // Selects carriage-return redraws (see Note [progress output]).
  bool is_tty = false;
  // The terminal's width in columns (0: unknown); the bar's lines stay narrower.
  int columns = 0;
  // Keras' jit_compile: each training step runs as one compiled graph (forward, loss and
  // gradients; Note [compiled training step]), the optimizer's update eagerly after it. Trains
  // as the eager step does.
  bool compile = false;
  // Adds "lr" (param group 0's learning rate, as the epoch's last step used it) to the progress
  // bar and the epoch logs, so History and every callback see it without a scheduler callback.
  bool log_lr = false;
};

// Note [trainer]
// ~~~~~~~~~~~~~~
// Keras' compile/fit/evaluate/predict over a kiln model. A training step is
// zero_grad, forward (model.train()), loss, backward, optimizer.step(); metrics read the detached
// logits. The loss includes the model's regularization terms (Module::add_regularizer), in
// training and in evaluation, as in Keras. The reported loss is the batch-size-weighted mean of the
// batch losses, which for a mean-reduced loss equals the loss over the whole epoch's samples.
// Validation and evaluate run with model.eval() under NoGradGuard and restore the model's previous
// mode. Batches must carry targets (Example::target) for fit and evaluate.
class Trainer {
 public:
  Trainer() = default;
  Trainer(nn::Module& model, optim::Optimizer& optimizer, LossFn loss,
          const std::vector<std::string>& metrics = {}, const Loc& loc = Loc::current());

  // Metric names as make_metric takes them; the reported key is the metric's name().
  void compile(nn::Module& model, optim::Optimizer& optimizer, LossFn loss,
               const std::vector<std::string>& metrics = {}, const Loc& loc = Loc::current());

  // Trains; callbacks run as Note [callback order] says. Before each epoch the train loader's
  // epoch is set to the absolute epoch number (DataLoader::set_epoch), so shuffles depend on the
  // epoch alone, not on how many passes the loader made before.
  History fit(data::DataLoader& train, const FitOptions& options, const Loc& loc = Loc::current());
  // fit with FitOptions{epochs, 0, validation, &out, verbose, is_tty}.
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
  // Note [training precision]: fit's forward pass and loss, evaluate and predict run in an
  // autocast region of this precision (parameters and optimizer state stay float32); float16
  // training scales the loss (grad_scaler()) and adds "loss_scale" and "skipped_steps" to the
  // epoch logs. Where the CPU has no native kernels for the dtype, autocast warns once and keeps
  // float32 (and no loss scaling) unless `force`. With FitOptions::compile, bfloat16 steps are
  // traced inside the region (Note [autocast in compiled steps]); float16 is refused there.
  void set_precision(Precision precision, bool force = false);
  Precision precision() const { return precision_; }
  // Whether the low precision is used on this machine (false for float32, and for a precision the
  // CPU has no native kernels for unless forced).
  bool low_precision_active() const;
  // float16's loss scaler (nullptr for the other precisions): its state belongs in checkpoints.
  optim::GradScaler* grad_scaler() { return scaler_ ? &*scaler_ : nullptr; }
  // Replaces the progress bar's clock (tests make the output deterministic with it).
  void set_clock(Clock clock) { clock_ = std::move(clock); }

 private:
  void check_compiled(const char* op, const Loc& loc) const;
  // evaluate; with `notify`, every callback's on_validation_batch_end sees each batch (fit's
  // validation).
  Logs run_evaluation(data::DataLoader& loader, bool notify, const Loc& loc);
  // Opens the forward pass's autocast region in `region` (nothing for float32).
  void enter_precision(std::optional<AutocastGuard>& region) const;

  nn::Module* model_ = nullptr;
  optim::Optimizer* optimizer_ = nullptr;
  LossFn loss_;
  std::vector<std::unique_ptr<Metric>> metrics_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  Clock clock_ = steady_seconds;
  Precision precision_ = Precision::kFloat32;
  bool force_precision_ = false;
  std::optional<optim::GradScaler> scaler_;
};

}  // namespace kiln::train
