#pragma once
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/module.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"

namespace kiln::train {

// One value per metric name ("loss", "accuracy", "val_loss", ...).
using Logs = std::map<std::string, double>;

// Note [callback order]
// ~~~~~~~~~~~~~~~~~~~~~
// Trainer::fit drives every callback, in the order they were added, through (Keras' order):
//   set_context(model, optimizer), then on_train_begin()
//   for each epoch e (absolute, from 0; a resumed fit starts at FitOptions::initial_epoch):
//     on_epoch_begin(e)
//     after each optimizer step: on_batch_end(b, {"loss": that batch's loss, "size": its sample
//       count, "lr": param group 0's lr during the step}), b from 0 within the epoch; true ends
//       the epoch after this batch and then training
//     during validation: on_validation_batch_end(logits, target) for each validation batch
//     after the progress bar's last line: update_logs(e, logs), where callbacks may add entries
//       (LearningRateScheduler and ReduceLROnPlateau add "lr"); History records the result
//     on_epoch_end(e, logs); true stops training after this epoch
//   on_train_end(the last epoch's logs)
// Callbacks that decide over several epochs (EarlyStopping, ModelCheckpoint, ReduceLROnPlateau)
// give their state() as JSON, which a run stores in its checkpoint; load_state() before the next
// fit continues from it (it is applied after on_train_begin's reset), so a resumed run stops,
// saves and lowers the lr as the uninterrupted one would.
// A stop requested mid-epoch still completes the epoch as Keras does: its logs cover the batches
// that ran, validation runs, and the epoch-end hooks and History see it. Every callback is called
// even after another one asked to stop. fit does not call on_train_end when it throws.
class Callback {
 public:
  Callback() = default;
  // `loc`: the line that made the callback, where its errors point (see where()).
  explicit Callback(const Loc& loc) : loc_(loc), has_loc_(true) {}
  virtual ~Callback() = default;
  // Names the callback in errors and stop reasons ("EarlyStopping").
  virtual std::string name() const { return "Callback"; }

  virtual void on_train_begin() {}
  virtual void on_train_end(const Logs& /*logs*/) {}
  virtual void on_epoch_begin(int /*epoch*/) {}
  virtual void update_logs(int /*epoch*/, Logs& /*logs*/) {}
  // Returning true stops training after this epoch.
  virtual bool on_epoch_end(int /*epoch*/, const Logs& /*logs*/) { return false; }
  // Returning true stops training after this batch (see Note [callback order]).
  virtual bool on_batch_end(int64_t /*batch*/, const Logs& /*batch_logs*/) { return false; }
  // Called by fit's validation with each batch's logits (eval mode, no grad) and targets.
  virtual void on_validation_batch_end(const Tensor& /*logits*/, const Tensor& /*target*/) {}
  // Why the callback asked to stop, for History::stop_reason (empty: fit says "<name> stopped").
  virtual std::string stop_reason() const { return {}; }
  // What the callback carries from epoch to epoch (null: nothing), and its restoration; a state
  // that does not fit the callback is an Error naming it.
  virtual nlohmann::json state() const { return nullptr; }
  virtual void load_state(const nlohmann::json& /*state*/, const Loc& /*loc*/ = Loc::current()) {}

  // The trainer's model and optimizer; fit sets them before on_train_begin. Tests that drive a
  // callback by hand set them directly.
  void set_context(nn::Module* model, optim::Optimizer* optimizer) {
    context_model_ = model;
    context_optimizer_ = optimizer;
  }
  bool has_model() const { return context_model_ != nullptr; }
  bool has_optimizer() const { return context_optimizer_ != nullptr; }
  // Throw a kiln::Error naming the callback when no model / optimizer was set.
  nn::Module& model(const Loc& loc = Loc::current()) const;
  optim::Optimizer& optimizer(const Loc& loc = Loc::current()) const;
  // The line of the running fit call; fit sets it with the context.
  void set_fit_location(const Loc& loc) {
    fit_loc_ = loc;
    has_fit_loc_ = true;
  }

 protected:
  // Where errors raised inside a hook point: the callback's construction line, unless that lies
  // in the standard library (std::make_shared constructs the object there, so a defaulted
  // Loc::current() records stl_construct.h) or is unknown; then the running fit call's line.
  Loc where() const;

 private:
  Loc loc_;
  bool has_loc_ = false;
  nn::Module* context_model_ = nullptr;
  optim::Optimizer* context_optimizer_ = nullptr;
  Loc fit_loc_;
  bool has_fit_loc_ = false;
};

// Stops when `monitor` has not improved by more than min_delta for `patience` consecutive epochs,
// counted as Keras counts them: patience 0 and 1 both stop at the first epoch without improvement,
// patience 2 at the second, and never at the first epoch. mode "auto" maximizes metrics whose name
// contains "acc", "f1", "precision" or "recall" and minimizes the others; "min" / "max" force it. A
// monitor missing from the logs is an Error naming the available keys.
//
// restore_best_weights keeps a copy of the model's state_dict from the best epoch and loads it
// back when stopping, or at train end when the best epoch was not the last one (Keras 3), so the
// model ends at its best epoch's weights either way.
class EarlyStopping final : public Callback {
 public:
  explicit EarlyStopping(std::string monitor = "val_loss", int patience = 0, double min_delta = 0.0,
                         std::string mode = "auto", bool restore_best_weights = false,
                         const Loc& loc = Loc::current());
  std::string name() const override { return "EarlyStopping"; }
  void on_train_begin() override;
  bool on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  std::string stop_reason() const override;
  // The wait count and the best value and epoch. With restore_best_weights, the best weights
  // themselves are not part of it: after a resume they are those of the best epoch since.
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state, const Loc& loc = Loc::current()) override;

  // The epoch (from 0) at which training was stopped, or -1.
  int stopped_epoch() const { return stopped_epoch_; }
  double best() const { return best_; }
  // The epoch (from 0) of best(), or -1 before any epoch.
  int best_epoch() const { return best_epoch_; }
  // Whether the best weights were loaded back into the model.
  bool restored() const { return restored_; }

 private:
  void restore();

  std::string monitor_;
  int patience_;
  double min_delta_;
  bool maximize_;
  bool restore_best_weights_;
  int wait_ = 0;
  int stopped_epoch_ = -1;
  int best_epoch_ = -1;
  int last_epoch_ = -1;
  double best_ = 0.0;
  bool has_best_ = false;
  bool restored_ = false;
  nn::StateDict best_weights_;
  nlohmann::json pending_state_;  // load_state's, applied by on_train_begin
};

// Saves the model's state_dict as safetensors (atomically) after every epoch, or with
// save_best_only only when `monitor` improved on the best value seen so far (strictly; the best
// is kept across fit calls, as in Keras). Placeholders in path_pattern:
//   {epoch}        the 1-based epoch, two digits ("model-{epoch}.safetensors" -> model-03...)
//   {epoch:03d}    the 1-based epoch with a fmt/Python format spec
//   {name}         a log value ("{val_loss}"), or {name:.4f} with a format spec
//   {{ and }}      literal braces
// The file's metadata holds "epoch" (1-based) and every log value as text. Parent directories
// must exist. mode as EarlyStopping's.
class ModelCheckpoint final : public Callback {
 public:
  explicit ModelCheckpoint(std::string path_pattern, std::string monitor = "val_loss",
                           bool save_best_only = false, std::string mode = "auto",
                           const Loc& loc = Loc::current());
  std::string name() const override { return "ModelCheckpoint"; }
  bool on_epoch_end(int epoch, const Logs& logs) override;
  // The best monitored value so far.
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state, const Loc& loc = Loc::current()) override;

  // The path for `epoch` (from 0) and `logs`.
  std::string format_path(int epoch, const Logs& logs) const;
  // Empty before the first save.
  const std::string& last_saved_path() const { return last_saved_path_; }
  int64_t save_count() const { return save_count_; }
  // The best monitored value so far (meaningful when has_best()).
  double best() const { return best_; }
  bool has_best() const { return has_best_; }

 private:
  struct Piece {
    std::string text;  // literal text, or the placeholder's key
    std::string spec;  // format spec (placeholders only)
    bool placeholder = false;
  };

  std::string pattern_;
  std::vector<Piece> pieces_;
  std::string monitor_;
  bool save_best_only_;
  bool maximize_;
  double best_ = 0.0;
  bool has_best_ = false;
  std::string last_saved_path_;
  int64_t save_count_ = 0;
};

// Keras' ReduceLROnPlateau: after `patience` epochs in a row (patience 0 acts as 1) in which
// `monitor` did not improve by more than min_delta (absolute), every param group's lr becomes
// max(lr * factor, min_lr); then `cooldown` epochs pass before bad epochs count again (Keras
// counts the epoch that ends the cooldown). Runs on optim::ReduceLROnPlateau, with Keras'
// patience and cooldown translated to PyTorch's counting. Adds "lr" (group 0's, before any
// reduction of this epoch) to the epoch logs; `verbose` receives one line per reduction.
class ReduceLROnPlateau final : public Callback {
 public:
  explicit ReduceLROnPlateau(std::string monitor = "val_loss", double factor = 0.1,
                             int patience = 10, double min_delta = 1e-4, int cooldown = 0,
                             double min_lr = 0.0, std::string mode = "auto",
                             std::ostream* verbose = nullptr, const Loc& loc = Loc::current());
  std::string name() const override { return "ReduceLROnPlateau"; }
  void on_train_begin() override;
  void update_logs(int epoch, Logs& logs) override;
  bool on_epoch_end(int epoch, const Logs& logs) override;
  // optim::ReduceLROnPlateau's state_dict (best, bad epochs, cooldown) and the reduction count.
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state, const Loc& loc = Loc::current()) override;

  // The number of epochs at which the lr was lowered during the current fit.
  int64_t reductions() const { return reductions_; }
  // The best monitored value of the current fit.
  double best() const;

 private:
  std::string monitor_;
  optim::ReduceLROnPlateauOptions options_;
  std::ostream* verbose_;
  std::unique_ptr<optim::ReduceLROnPlateau> plateau_;
  int64_t reductions_ = 0;
  nlohmann::json pending_state_;  // load_state's, applied by on_train_begin
};

// Writes one CSV row per epoch to `path`: the header "epoch<sep><sorted log keys>" (keys fixed
// by the first epoch; a key missing later is written as NA, new keys are left out), then
// "<epoch from 0><sep><values>" (Keras' columns). Every row is flushed, so a crash keeps the
// finished epochs. append continues an existing file, reusing its header's keys (no second
// header); otherwise the file is truncated when training begins.
class CSVLogger final : public Callback {
 public:
  explicit CSVLogger(std::string path, bool append = false, char separator = ',',
                     const Loc& loc = Loc::current());
  std::string name() const override { return "CSVLogger"; }
  void on_train_begin() override;
  bool on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  const std::string& path() const { return path_; }

 private:
  void open();

  std::string path_;
  bool append_;
  char separator_;
  std::ofstream file_;
  std::vector<std::string> keys_;
  bool header_done_ = false;
};

// Sets the learning rate each epoch. Two forms:
//  - wraps an optim::LRScheduler (built on the trainer's optimizer) and steps it after every
//    epoch, or with per_batch after every optimizer step (OneCycleLR), in PyTorch's order
//    (optimizer.step() before scheduler.step());
//  - Keras' schedule(epoch, lr) -> new lr, applied to every param group before each epoch
//    (epoch absolute, from 0); the result must be finite and >= 0.
// Both add "lr" (group 0's current lr, the one the epoch trained with when stepping per epoch)
// to the epoch logs.
class LearningRateScheduler final : public Callback {
 public:
  using Schedule = std::function<double(int epoch, double lr)>;
  explicit LearningRateScheduler(std::shared_ptr<optim::LRScheduler> scheduler,
                                 bool per_batch = false, const Loc& loc = Loc::current());
  explicit LearningRateScheduler(Schedule schedule, std::ostream* verbose = nullptr,
                                 const Loc& loc = Loc::current());
  std::string name() const override { return "LearningRateScheduler"; }
  void on_epoch_begin(int epoch) override;
  bool on_batch_end(int64_t batch, const Logs& batch_logs) override;
  void update_logs(int epoch, Logs& logs) override;
  bool on_epoch_end(int epoch, const Logs& logs) override;

 private:
  std::shared_ptr<optim::LRScheduler> scheduler_;
  bool per_batch_ = false;
  Schedule schedule_;
  std::ostream* verbose_ = nullptr;
};

// Stops training after the first batch whose loss is NaN or infinite (Keras' TerminateOnNaN);
// fit then reports the reason in History::stop_reason. `out` receives a one-line notice.
class TerminateOnNaN final : public Callback {
 public:
  explicit TerminateOnNaN(std::ostream* out = nullptr, const Loc& loc = Loc::current())
      : Callback(loc), out_(out) {}
  std::string name() const override { return "TerminateOnNaN"; }
  void on_train_begin() override;
  void on_epoch_begin(int epoch) override { epoch_ = epoch; }
  bool on_batch_end(int64_t batch, const Logs& batch_logs) override;
  std::string stop_reason() const override;

  // Where training was terminated (from 0), or -1.
  int terminated_epoch() const { return terminated_epoch_; }
  int64_t terminated_batch() const { return terminated_batch_; }

 private:
  std::ostream* out_;
  int epoch_ = 0;
  int terminated_epoch_ = -1;
  int64_t terminated_batch_ = -1;
  double bad_loss_ = 0.0;
};

// The hooks of a LambdaCallback; empty ones do nothing (and never stop).
struct LambdaHooks {
  std::function<void()> on_train_begin = {};
  std::function<void(const Logs&)> on_train_end = {};
  std::function<void(int)> on_epoch_begin = {};
  std::function<void(int, Logs&)> update_logs = {};
  std::function<bool(int, const Logs&)> on_epoch_end = {};
  std::function<bool(int64_t, const Logs&)> on_batch_end = {};
};

// A callback made of functions, e.g.
//   LambdaCallback({.on_epoch_end = [](int e, const Logs& l) { ...; return false; }})
class LambdaCallback final : public Callback {
 public:
  explicit LambdaCallback(LambdaHooks hooks) : hooks_(std::move(hooks)) {}
  std::string name() const override { return "LambdaCallback"; }
  void on_train_begin() override;
  void on_train_end(const Logs& logs) override;
  void on_epoch_begin(int epoch) override;
  void update_logs(int epoch, Logs& logs) override;
  bool on_epoch_end(int epoch, const Logs& logs) override;
  bool on_batch_end(int64_t batch, const Logs& batch_logs) override;

 private:
  LambdaHooks hooks_;
};

}  // namespace kiln::train
