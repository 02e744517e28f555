#include "kiln/train/fit.h"

#include <limits>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/join.h"

namespace kiln::train {
namespace {

std::string available_keys(const Logs& logs) {
  std::string keys;
  for (const auto& [name, value] : logs) keys += (keys.empty() ? "" : ", ") + name;
  return keys.empty() ? "none" : keys;
}

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

}  // namespace

int64_t History::epochs() const {
  auto it = metrics.find("loss");
  return it == metrics.end() ? 0 : static_cast<int64_t>(it->second.size());
}

EarlyStopping::EarlyStopping(std::string monitor, int patience, double min_delta, std::string mode,
                             const Loc& loc)
    : monitor_(std::move(monitor)), patience_(patience), min_delta_(min_delta), loc_(loc) {
  if (patience < 0) fail("EarlyStopping", loc, "expected patience >= 0, but got {}", patience);
  if (mode == "auto") {
    maximize_ = false;
    for (const char* key : {"acc", "f1", "precision", "recall"})
      if (monitor_.find(key) != std::string::npos) maximize_ = true;
  } else if (mode == "min" || mode == "max") {
    maximize_ = mode == "max";
  } else {
    fail("EarlyStopping", loc, "expected mode \"auto\", \"min\" or \"max\", but got \"{}\"", mode);
  }
}

void EarlyStopping::on_train_begin() {
  wait_ = 0;
  stopped_epoch_ = -1;
  has_best_ = false;
}

bool EarlyStopping::on_epoch_end(int epoch, const Logs& logs) {
  auto it = logs.find(monitor_);
  if (it == logs.end())
    fail("EarlyStopping", loc_, "expected monitor \"{}\" among the logs, but got {}", monitor_,
         available_keys(logs));
  const double value = it->second;
  const bool improved =
      !has_best_ || (maximize_ ? value - min_delta_ > best_ : value + min_delta_ < best_);
  if (improved) {
    best_ = value;
    has_best_ = true;
    wait_ = 0;
    return false;
  }
  if (++wait_ > patience_) {
    stopped_epoch_ = epoch;
    return true;
  }
  return false;
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
  check_compiled("fit", loc);
  if (epochs < 0) fail("fit", loc, "expected epochs >= 0, but got {}", epochs);
  History history;
  for (auto& callback : callbacks_) callback->on_train_begin();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    Logs logs;
    {
      ModeGuard mode(*model_, /*training=*/true);
      Mean loss_mean;
      for (auto& metric : metrics_) metric->reset();
      const int64_t steps = train.num_batches();
      std::unique_ptr<ProgressBar> bar;
      if (verbose) {
        out << "Epoch " << epoch + 1 << "/" << epochs << '\n';
        bar = std::make_unique<ProgressBar>(steps, out, is_tty, clock_);
      }
      int64_t step = 0, samples = 0;
      for (const data::Example& batch : train) {
        check_batch("fit", batch, loc);
        optimizer_->zero_grad();
        const Tensor logits = (*model_)(batch.data);
        const Tensor loss = loss_(logits, batch.target);
        loss.backward();
        optimizer_->step(loc);

        const int64_t n = batch.data.dim() > 0 ? batch.data.size(0) : 1;
        loss_mean.update(loss.item(loc), static_cast<double>(n));
        {
          NoGradGuard no_grad;
          const Tensor detached = logits.detach();
          for (auto& metric : metrics_) metric->update(detached, batch.target, loc);
        }
        ++step;
        samples += n;
        logs["loss"] = loss_mean.result();
        for (auto& metric : metrics_) logs[metric->name()] = metric->result();
        if (bar) bar->update(step, logs, samples);
      }
      logs["loss"] = loss_mean.result();
      for (auto& metric : metrics_) logs[metric->name()] = metric->result();
      if (validation != nullptr)
        for (const auto& [name, value] : evaluate(*validation, loc)) logs["val_" + name] = value;
      if (bar) bar->finish(logs, samples);
    }
    for (const auto& [name, value] : logs) history.metrics[name].push_back(value);
    bool stop = false;
    for (auto& callback : callbacks_) stop = callback->on_epoch_end(epoch, logs) || stop;
    if (stop) break;
  }
  return history;
}

Logs Trainer::evaluate(data::DataLoader& loader, const Loc& loc) {
  check_compiled("evaluate", loc);
  ModeGuard mode(*model_, /*training=*/false);
  NoGradGuard no_grad;
  Mean loss_mean;
  for (auto& metric : metrics_) metric->reset();
  for (const data::Example& batch : loader) {
    check_batch("evaluate", batch, loc);
    const Tensor logits = (*model_)(batch.data);
    const Tensor loss = loss_(logits, batch.target);
    const int64_t n = batch.data.dim() > 0 ? batch.data.size(0) : 1;
    loss_mean.update(loss.item(loc), static_cast<double>(n));
    for (auto& metric : metrics_) metric->update(logits, batch.target, loc);
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
    outputs.push_back((*model_)(batch.data));
  }
  if (outputs.empty()) return Tensor();
  return cat(outputs, 0, loc);
}

}  // namespace kiln::train
