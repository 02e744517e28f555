#include "kiln/train/fit.h"

#include <limits>
#include <optional>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/join.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/train/compiled_step.h"

namespace kiln::train {
namespace {

void check_batch(const char* op, const data::Example& batch, const Loc& loc) {
  if (!batch.data.defined() || !batch.target.defined())
    fail(op, loc, "expected batches with data and target, but got a batch without {}",
         batch.data.defined() ? "target" : "data");
}

// Restores a module's train/eval mode when leaving a scope.
class ModeGuard {
 public:
  ModeGuard(nn::Module& model, bool training) : model_(model), was_(model.is_training()) {
    model_.train(training);
  }
  ~ModeGuard() { model_.train(was_); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  nn::Module& model_;
  bool was_;
};

// The loss plus the model's regularization terms (nn::Module::add_regularizer), as Keras adds
// model.losses to both the training and the evaluation loss.
Tensor total_loss(const LossFn& loss_fn, const nn::Module& model, const Tensor& logits,
                  const Tensor& target) {
  Tensor loss = loss_fn(logits, target);
  const Tensor penalty = model.regularization_loss();
  return penalty.defined() ? add(loss, penalty) : loss;
}

// Param group 0's learning rate (0 for an optimizer without groups).
double current_lr(const optim::Optimizer& optimizer) {
  return optimizer.param_groups().empty() ? 0.0 : optimizer.param_groups()[0].lr();
}

}  // namespace

int64_t History::epochs() const {
  auto it = metrics.find("loss");
  return it == metrics.end() ? 0 : static_cast<int64_t>(it->second.size());
}

Trainer::Trainer(nn::Module& model, optim::Optimizer& optimizer, LossFn loss,
                 const std::vector<std::string>& metrics, const Loc& loc) {
  compile(model, optimizer, std::move(loss), metrics, loc);
}

void Trainer::compile(nn::Module& model, optim::Optimizer& optimizer, LossFn loss,
                      const std::vector<std::string>& metrics, const Loc& loc) {
  if (!loss) fail("compile", loc, "expected a loss function, but got an empty one");
  std::vector<std::unique_ptr<Metric>> made;
  for (const auto& name : metrics) {
    made.push_back(make_metric(name, loc));
    if (made.back()->name() == "loss")
      fail("compile", loc, "expected metric names other than \"loss\", but got \"{}\"", name);
  }
  model_ = &model;
  optimizer_ = &optimizer;
  loss_ = std::move(loss);
  metrics_ = std::move(made);
}

void Trainer::check_compiled(const char* op, const Loc& loc) const {
  if (model_ == nullptr) fail(op, loc, "expected a compiled Trainer, but compile() was not called");
}

History Trainer::fit(data::DataLoader& train, int epochs, data::DataLoader* validation,
                     std::ostream& out, bool verbose, bool is_tty, const Loc& loc) {
  return fit(train,
             FitOptions{.epochs = epochs,
                        .initial_epoch = 0,
                        .validation = validation,
                        .out = &out,
                        .verbose = verbose,
                        .is_tty = is_tty},
             loc);
}

History Trainer::fit(data::DataLoader& train, const FitOptions& options, const Loc& loc) {
  check_compiled("fit", loc);
  const int epochs = options.epochs;
  if (epochs < 0) fail("fit", loc, "expected epochs >= 0, but got {}", epochs);
  if (options.initial_epoch < 0 || options.initial_epoch > epochs)
    fail("fit", loc, "expected 0 <= initial_epoch <= epochs ({}), but got initial_epoch {}", epochs,
         options.initial_epoch);
  if (options.verbose && options.out == nullptr)
    fail("fit", loc, "expected an output stream for verbose progress, but got a null pointer");
  std::ostream* out = options.verbose ? options.out : nullptr;

  // Note [training precision]: loss scaling only where float16 actually runs.
  optim::GradScaler* scaler = scaler_ && low_precision_active() ? &*scaler_ : nullptr;
  std::optional<CompiledStep> compiled;
  if (options.compile) {
    // Note [autocast in compiled steps]; where bfloat16 does not run (no native kernels, not
    // forced), the eager steps' region would warn and stay float32, and so does this.
    CompiledStepOptions step_options;
    if (precision_ != Precision::kFloat32) {
      std::optional<AutocastGuard> warn_once;
      enter_precision(warn_once);
      if (low_precision_active()) {
        step_options.autocast_dtype = precision_compute_dtype(precision_);
        step_options.autocast_options.force = force_precision_;
      }
    }
    step_options.grad_scaler = scaler;  // Note [loss scaling in compiled steps]
    compiled.emplace(*model_, loss_, *optimizer_, step_options);
  }
  History history;
  for (auto& callback : callbacks_) {
    callback->set_context(model_, optimizer_);
    callback->set_fit_location(loc);
  }
  for (auto& callback : callbacks_) callback->on_train_begin();
  Logs logs;
  for (int epoch = options.initial_epoch; epoch < epochs; ++epoch) {
    train.set_epoch(static_cast<uint64_t>(epoch));
    for (auto& callback : callbacks_) callback->on_epoch_begin(epoch);
    logs.clear();
    std::vector<std::string> stop_reasons;
    auto stop_reason = [](const Callback& callback) {
      std::string reason = callback.stop_reason();
      return reason.empty() ? callback.name() + " stopped training" : reason;
    };
    {
      ModeGuard mode(*model_, /*training=*/true);
      Mean loss_mean;
      for (auto& metric : metrics_) metric->reset();
      const int64_t steps = train.num_batches();
      std::unique_ptr<ProgressBar> bar;
      if (out != nullptr) {
        *out << "Epoch " << epoch + 1 << "/" << epochs << '\n';
        bar =
            std::make_unique<ProgressBar>(steps, *out, options.is_tty, clock_, 30, options.columns);
      }
      int64_t step = 0, samples = 0;
      for (const data::Example& batch : train) {
        check_batch("fit", batch, loc);
        Tensor logits, loss;
        if (compiled) {
          const CompiledStep::Result r = (*compiled)(batch.data, batch.target, loc);
          logits = r.logits;
          loss = r.loss;
        } else {
          optimizer_->zero_grad();
          {
            std::optional<AutocastGuard> region;
            enter_precision(region);
            logits = (*model_)(batch.data);
            loss = total_loss(loss_, *model_, logits, batch.target);
          }
          if (scaler != nullptr) {
            scaler->scale(loss, loc).backward();
            scaler->step(*optimizer_, loc);
            scaler->update(loc);
          } else {
            loss.backward();
            optimizer_->step(loc);
          }
        }

        const int64_t n = batch.data.dim() > 0 ? batch.data.dim_size(0) : 1;
        const double batch_loss = loss.item(loc);
        loss_mean.update(batch_loss, static_cast<double>(n));
        {
          NoGradGuard no_grad;
          const Tensor detached = logits.detach();
          for (auto& metric : metrics_) metric->update(detached, batch.target, loc);
        }
        ++step;
        samples += n;
        logs["loss"] = loss_mean.result();
        for (auto& metric : metrics_) logs[metric->name()] = metric->result();
        const double lr = current_lr(*optimizer_);
        if (options.log_lr) logs["lr"] = lr;
        if (bar) bar->update(step, logs, samples);
        const Logs batch_logs{{"loss", batch_loss}, {"size", static_cast<double>(n)}, {"lr", lr}};
        for (auto& callback : callbacks_)
          if (callback->on_batch_end(step - 1, batch_logs))
            stop_reasons.push_back(stop_reason(*callback));
        if (!stop_reasons.empty()) break;
      }
      logs["loss"] = loss_mean.result();
      for (auto& metric : metrics_) logs[metric->name()] = metric->result();
      if (options.log_lr) logs["lr"] = current_lr(*optimizer_);
      if (scaler != nullptr) {
        logs["loss_scale"] = scaler->get_scale();
        logs["skipped_steps"] = static_cast<double>(scaler->skipped_steps());
      }
      if (options.validation != nullptr && bar) bar->validating();
      if (options.validation != nullptr)
        for (const auto& [name, value] : run_evaluation(*options.validation, true, loc))
          logs["val_" + name] = value;
      if (bar) bar->finish(logs, samples);
    }
    for (auto& callback : callbacks_) callback->update_logs(epoch, logs);
    history.epoch.push_back(epoch);
    for (const auto& [name, value] : logs) history.metrics[name].push_back(value);
    for (auto& callback : callbacks_)
      if (callback->on_epoch_end(epoch, logs)) stop_reasons.push_back(stop_reason(*callback));
    if (!stop_reasons.empty()) {
      history.stopped_epoch = epoch;
      for (const auto& reason : stop_reasons)
        history.stop_reason += (history.stop_reason.empty() ? "" : "; ") + reason;
      if (out != nullptr)
        *out << "Stopped after epoch " << epoch + 1 << ": " << history.stop_reason << '\n';
      break;
    }
  }
  for (auto& callback : callbacks_) callback->on_train_end(logs);
  return history;
}

void Trainer::set_precision(Precision precision, bool force) {
  precision_ = precision;
  force_precision_ = force;
  scaler_.reset();
  if (precision == Precision::kFloat16) scaler_.emplace();
}

bool Trainer::low_precision_active() const {
  const std::optional<DType> dt = precision_compute_dtype(precision_);
  return dt && (force_precision_ || has_native_low_precision(*dt));
}

void Trainer::enter_precision(std::optional<AutocastGuard>& region) const {
  if (const std::optional<DType> dt = precision_compute_dtype(precision_)) {
    AutocastOptions options;
    options.force = force_precision_;
    region.emplace(*dt, options);
  }
}

Logs Trainer::evaluate(data::DataLoader& loader, const Loc& loc) {
  check_compiled("evaluate", loc);
  return run_evaluation(loader, false, loc);
}

Logs Trainer::run_evaluation(data::DataLoader& loader, bool notify, const Loc& loc) {
  ModeGuard mode(*model_, /*training=*/false);
  NoGradGuard no_grad;
  std::optional<AutocastGuard> region;
  enter_precision(region);
  Mean loss_mean;
  for (auto& metric : metrics_) metric->reset();
  for (const data::Example& batch : loader) {
    check_batch("evaluate", batch, loc);
    const Tensor logits = (*model_)(batch.data);
    const Tensor loss = total_loss(loss_, *model_, logits, batch.target);
    const int64_t n = batch.data.dim() > 0 ? batch.data.dim_size(0) : 1;
    loss_mean.update(loss.item(loc), static_cast<double>(n));
    for (auto& metric : metrics_) metric->update(logits, batch.target, loc);
    if (notify)
      for (auto& callback : callbacks_) callback->on_validation_batch_end(logits, batch.target);
  }
  Logs logs{{"loss", loss_mean.result()}};
  for (auto& metric : metrics_) logs[metric->name()] = metric->result();
  return logs;
}

Tensor Trainer::predict(data::DataLoader& loader, const Loc& loc) {
  check_compiled("predict", loc);
  ModeGuard mode(*model_, /*training=*/false);
  NoGradGuard no_grad;
  std::vector<Tensor> outputs;
  for (const data::Example& batch : loader) {
    if (!batch.data.defined()) fail("predict", loc, "expected batches with data, but got none");
    std::optional<AutocastGuard> region;
    enter_precision(region);
    // float32 whatever the compute precision, as Keras' mixed-precision models end.
    outputs.push_back(to_dtype((*model_)(batch.data), DType::Float32, loc));
  }
  if (outputs.empty()) return Tensor();
  return cat(outputs, 0, loc);
}

}  // namespace kiln::train
