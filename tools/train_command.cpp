#include "tools/train_command.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "kiln/kiln.h"
#include "tools/datasets.h"
#include "tools/interrupt.h"
#include "tools/report.h"
#include "tools/run_dir.h"
#include "tools/run_logs.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainArgs& a, std::vector<Tensor> params) {
  if (a.optimizer == "sgd")
    return std::make_unique<optim::SGD>(
        std::move(params),
        optim::SGDOptions{.lr = a.lr, .momentum = a.momentum, .weight_decay = a.weight_decay});
  if (a.optimizer == "adam")
    return std::make_unique<optim::Adam>(
        std::move(params), optim::AdamOptions{.lr = a.lr, .weight_decay = a.weight_decay});
  if (a.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(
        std::move(params), optim::AdamWOptions{.lr = a.lr, .weight_decay = a.weight_decay});
  throw Error("[kiln train] expected --optimizer sgd, adam or adamw, but got \"" + a.optimizer +
              "\"");
}

// "constant" (none), "cosine" (per epoch, to 0 at the last epoch) or "onecycle" (per batch, peak
// at --lr). Returns whether it steps per batch.
// `done_epochs` / `done_steps` > 0: the schedule of a resumed run whose length changed, placed
// where a schedule of the new length is after that much training.
std::unique_ptr<optim::LRScheduler> make_schedule(const TrainArgs& a, optim::Optimizer& opt,
                                                  int64_t steps_per_epoch, bool& per_batch,
                                                  int64_t done_epochs = 0, int64_t done_steps = 0) {
  per_batch = a.schedule == "onecycle";
  if (a.schedule == "constant") return nullptr;
  if (a.schedule == "cosine")
    return std::make_unique<optim::CosineAnnealingLR>(opt, a.epochs, 0.0, done_epochs - 1);
  if (a.schedule == "onecycle")
    return std::make_unique<optim::OneCycleLR>(
        opt, optim::OneCycleLROptions{.max_lr = {a.lr}, .total_steps = a.epochs * steps_per_epoch},
        done_steps - 1);
  throw Error("[kiln train] expected --schedule constant, cosine or onecycle, but got \"" +
              a.schedule + "\"");
}

// The checkpoint's record of the run: the settings, and where the data came from.
nlohmann::json args_json(const TrainArgs& a) {
  nlohmann::json j = run_settings(a);
  j["data_dir"] = a.data_dir;
  j["workers"] = a.workers;
  return j;
}

// What Ctrl-C prints once `epochs_done` epochs are in the checkpoint.
std::string interrupt_message(const TrainArgs& a, int epochs_done) {
  const std::string ckpt = (fs::path(a.out) / "checkpoint").string();
  if (epochs_done == 0)
    return fmt::format(
        "kiln train: interrupted before the first epoch ended; {} holds no checkpoint yet "
        "(start again with --overwrite)",
        a.out);
  return fmt::format(
      "kiln train: interrupted. The last checkpoint, after epoch {} of {}, is in {}; continue "
      "with: kiln train --out {} --resume",
      epochs_done, a.epochs, ckpt, a.out);
}

// Saves the full training state after every epoch (with the state of the callbacks that decide
// over epochs, and why training stopped early), steps the LR schedule, keeps the history
// (including epochs from before a resume) and rewrites history.csv and curves.svg from it. Added
// after every other callback, so that what it saves includes their decisions for the epoch.
class EpochState final : public train::Callback {
 public:
  EpochState(const TrainArgs& args, fs::path out, const DataInfo& info, nn::Module& model,
             optim::Optimizer& opt, optim::LRScheduler* schedule, bool per_batch,
             train::History history, std::vector<std::shared_ptr<train::Callback>> stateful,
             std::shared_ptr<train::EarlyStopping> early)
      : args_(args),
        out_(std::move(out)),
        info_(info),
        model_(model),
        opt_(opt),
        schedule_(schedule),
        per_batch_(per_batch),
        history_(std::move(history)),
        stateful_(std::move(stateful)),
        early_(std::move(early)) {}

  bool on_batch_end(int64_t, const train::Logs&) override {
    ++step_;
    if (schedule_ != nullptr && per_batch_) schedule_->step();
    return false;
  }

  bool on_epoch_end(int epoch, const train::Logs& logs) override {
    if (schedule_ != nullptr && !per_batch_) schedule_->step();
    for (const auto& [name, value] : logs) history_.metrics[name].push_back(value);
    nlohmann::json meta = {
        {"args", args_json(args_)}, {"data_info", info_.to_json()}, {"history", history_.metrics}};
    for (const auto& callback : stateful_) meta["callbacks"][callback->name()] = callback->state();
    if (early_ && early_->stopped_epoch() == epoch) meta["stop_reason"] = early_->stop_reason();
    if (scaler_ != nullptr) meta["grad_scaler"] = scaler_->state_dict();
    train::save_checkpoint((out_ / "checkpoint").string(), model_, opt_, schedule_,
                           train::CheckpointState{epoch + 1, step_, meta});
    write_history_csv((out_ / "history.csv").string(), history_);
    train::write_training_curves(history_, (out_ / "curves.svg").string());
    on_interrupt_say(interrupt_message(args_, epoch + 1));
    return false;
  }

  const train::History& history() const { return history_; }
  void set_step(int64_t step) { step_ = step; }
  // float16's loss scaler, whose state is saved with each checkpoint (nullptr: none).
  void set_grad_scaler(const optim::GradScaler* scaler) { scaler_ = scaler; }

 private:
  const TrainArgs& args_;
  fs::path out_;
  DataInfo info_;
  nn::Module& model_;
  optim::Optimizer& opt_;
  optim::LRScheduler* schedule_;
  bool per_batch_;
  train::History history_;
  std::vector<std::shared_ptr<train::Callback>> stateful_;
  std::shared_ptr<train::EarlyStopping> early_;
  int64_t step_ = 0;
  const optim::GradScaler* scaler_ = nullptr;
};

std::shared_ptr<const data::Dataset> augmented(std::shared_ptr<const data::Dataset> ds,
                                               const DataInfo& info) {
  data::Compose stages(
      {data::RandomCrop(info.image_size, info.image_size / 8), data::RandomHorizontalFlip(0.5)});
  return std::make_shared<data::TransformDataset>(std::move(ds), stages);
}

// The metrics a run's epoch logs hold, which --monitor and --checkpoint-best may name.
const std::vector<std::string>& epoch_metrics() {
  static const std::vector<std::string> names = {"val_loss", "val_accuracy", "loss", "accuracy"};
  return names;
}

void check_callback_flags(const TrainArgs& a) {
  for (const auto& [flag, value] :
       {std::pair{"--monitor", a.monitor}, std::pair{"--checkpoint-best", a.checkpoint_best}}) {
    if (value.empty() && std::string(flag) == "--checkpoint-best") continue;
    if (std::find(epoch_metrics().begin(), epoch_metrics().end(), value) == epoch_metrics().end())
      throw Error(fmt::format("[kiln train] expected {} {}, but got \"{}\"", flag,
                              fmt::join(epoch_metrics(), ", "), value));
  }
  if (a.reduce_lr_on_plateau > 0 && a.schedule != "constant")
    throw Error(
        "[kiln train] --reduce-lr-on-plateau sets the learning rate itself; it cannot be "
        "combined with --schedule " +
        a.schedule);
  if (a.augment && a.data == "csv")
    throw Error("[kiln train] --augment crops and flips images; --data csv has none");
}

// The callbacks the flags ask for, in the order fit calls them; those that carry state from epoch
// to epoch also go into `stateful` (saved in the checkpoint, restored on resume).
struct RunCallbacks {
  std::vector<std::shared_ptr<train::Callback>> all, stateful;
  std::shared_ptr<train::EarlyStopping> early;
};

RunCallbacks make_callbacks(const TrainArgs& a, const fs::path& out, const RunData& d,
                            int64_t resumed_step) {
  RunCallbacks c;
  c.all.push_back(std::make_shared<StepsCsv>((out / "steps.csv").string(), resumed_step));
  c.all.push_back(std::make_shared<ValidationReport>((out / "validation.json").string(),
                                                     a.validation_split > 0 ? "validation" : "test",
                                                     d.info.class_names));
  if (a.early_stopping > 0) {
    c.early = std::make_shared<train::EarlyStopping>(a.monitor, a.early_stopping);
    c.all.push_back(c.early);
    c.stateful.push_back(c.early);
  }
  if (a.reduce_lr_on_plateau > 0) {
    auto plateau = std::make_shared<train::ReduceLROnPlateau>(
        a.monitor, a.lr_factor, a.reduce_lr_on_plateau, 1e-4, 0, 0.0, "auto", &std::cout);
    c.all.push_back(plateau);
    c.stateful.push_back(plateau);
  }
  if (!a.checkpoint_best.empty()) {
    auto best = std::make_shared<train::ModelCheckpoint>((out / "best.safetensors").string(),
                                                         a.checkpoint_best, true);
    c.all.push_back(best);
    c.stateful.push_back(best);
  }
  return c;
}

// For --resume: adopts the settings recorded in the checkpoint metadata `meta` (refusing changed
// ones without --override) and returns the epochs it was set up for.
int adopt_recorded_run(TrainArgs& a, const nlohmann::json& meta, const fs::path& out) {
  const int recorded_epochs = meta.at("args").value("epochs", a.epochs);
  const std::vector<std::string> changes =
      adopt_recorded_settings(a, meta.at("args"), out.string());
  if (!changes.empty() && !a.override_settings)
    throw Error(fmt::format(
        "[kiln train] --resume: {} was trained with other settings: {}. A resumed run takes "
        "its settings from the run's record, so leave these flags out, or pass --override to "
        "continue with the new values",
        out.string(), fmt::join(changes, ", ")));
  if (!changes.empty())
    std::cout << fmt::format("Continuing with changed settings (--override): {}\n",
                             fmt::join(changes, ", "));
  if (a.epochs != recorded_epochs && a.schedule != "constant" && !a.override_settings)
    throw Error(fmt::format(
        "[kiln train] --resume: --schedule {} spans the run's --epochs {}; continuing to {} "
        "epochs would train the extra ones past the schedule's end. Pass --override to place "
        "the run on a {}-epoch schedule from here (the learning rate moves to where that "
        "schedule is now), or train a new run with --epochs {}",
        a.schedule, recorded_epochs, a.epochs, a.epochs, a.epochs));
  return recorded_epochs;
}

}  // namespace

int run_train(const TrainArgs& args) {
  TrainArgs a = args;
  if (a.epochs < 1)
    throw Error("[kiln train] expected --epochs >= 1, but got " + std::to_string(a.epochs));
  check_callback_flags(a);  // before anything in --out changes
  if (a.threads > 0) set_num_threads(a.threads);
  const fs::path out(a.out);
  const std::string ckpt = (out / "checkpoint").string();
  // Note: an earlier run is never replaced or restarted silently (issue 16, defects 2 and 3).
  const std::vector<std::string> previous = previous_run_files(out.string());
  const std::string listed = fmt::format("{}", fmt::join(previous, ", "));
  const bool resuming = a.resume && train::checkpoint_exists(ckpt);
  if (!a.resume && !previous.empty() && !a.overwrite)
    throw Error("[kiln train] " + out.string() + " already holds a run (" + listed +
                "); pass --resume to continue it, or --overwrite to replace it");
  if (a.resume && !resuming && !previous.empty() && !a.overwrite)
    throw Error("[kiln train] --resume: " + out.string() + " holds a run (" + listed +
                ") but no complete checkpoint in " + ckpt +
                "; nothing was changed. Pass --overwrite (without --resume) to start over there");
  if (!resuming && a.overwrite) remove_run_files(out.string());
  fs::create_directories(out);
  remove_stale_temporaries(out.string());
  const nlohmann::json meta =
      resuming ? train::read_checkpoint_metadata(ckpt) : nlohmann::json::object();
  const int recorded_epochs = resuming ? adopt_recorded_run(a, meta, out) : a.epochs;
  check_callback_flags(a);  // again: the settings a resumed run adopted

  RunData d = load_run_data(data_args(a));
  if (a.train_samples > 0 && a.train_samples < d.train->size())
    d.train = std::make_shared<data::Subset>(d.train, 0, a.train_samples);
  manual_seed(a.seed);
  auto model = make_model_for(a.model, d.info);
  const train::Precision precision = train::parse_precision(a.precision);
  const std::string summary = nn::summary(*model, d.info.input_shape(), DType::Float32,
                                          train::precision_compute_dtype(precision));
  std::cout << summary;
  write_text((out / "summary.txt").string(), summary);

  // Validation data: the test split (monitoring only), or Keras-style the last
  // --validation-split of the training split, which then is not trained on.
  std::shared_ptr<const data::Dataset> train_set = d.train, val_set = d.test;
  if (a.validation_split > 0)
    std::tie(train_set, val_set) = data::validation_split(d.train, a.validation_split);
  data::DataLoader train_loader(
      a.augment ? augmented(train_set, d.info) : train_set,
      {.batch_size = a.batch_size, .shuffle = true, .num_workers = a.workers, .seed = a.seed});
  data::DataLoader test_loader(d.test, {.batch_size = 500, .num_workers = a.workers});
  data::DataLoader val_loader(val_set, {.batch_size = 500, .num_workers = a.workers});

  auto opt = make_optimizer(a, model->parameters());
  bool per_batch = false;
  auto schedule = make_schedule(a, *opt, train_loader.num_batches(), per_batch);

  int initial_epoch = 0;
  int64_t step = 0;
  train::History history;
  if (resuming) {
    // A schedule whose length changed is rebuilt at its new length, not restored.
    const bool restretch = schedule != nullptr && a.epochs != recorded_epochs;
    const train::CheckpointState state =
        train::load_checkpoint(ckpt, *model, *opt, restretch ? nullptr : schedule.get());
    initial_epoch = static_cast<int>(state.epoch);
    step = state.step;
    if (restretch)
      schedule = make_schedule(a, *opt, train_loader.num_batches(), per_batch, initial_epoch, step);
    history.metrics = meta.at("history").get<decltype(history.metrics)>();
    std::cout << "Resuming from " << ckpt << " after epoch " << initial_epoch << "\n";
  } else if (a.resume) {
    std::cout << "No run in " << out.string() << " yet; starting from scratch\n";
  }

  // Recorded once the data loaded and the model was built: a run that failed to start leaves
  // nothing that would block the next one.
  write_text(
      (out / "config.json").string(),
      nlohmann::json{{"settings", args_json(a)}, {"data_info", d.info.to_json()}}.dump(2) + "\n");
  train::Trainer trainer(*model, *opt,
                         [&](const Tensor& logits, const Tensor& target) {
                           return cross_entropy(logits, target, Tensor(), -100, Reduction::Mean,
                                                a.label_smoothing);
                         },
                         {"accuracy"});
  if (initial_epoch > 0)  // repairs a row a kill lost
    write_history_csv((out / "history.csv").string(), history);
  on_interrupt_say(interrupt_message(a, initial_epoch));
  RunCallbacks callbacks = make_callbacks(a, out, d, step);
  for (const auto& callback : callbacks.stateful)
    if (meta.contains("callbacks") && meta["callbacks"].contains(callback->name()))
      callback->load_state(meta["callbacks"][callback->name()]);
  for (const auto& callback : callbacks.all) trainer.add_callback(callback);
  trainer.set_precision(precision);
  if (precision != train::Precision::kFloat32)
    std::cout << fmt::format(
        "Precision: {} ({})\n", train::precision_policy_name(precision),
        trainer.low_precision_active()
            ? "compute in " + std::string(dtype_name(*train::precision_compute_dtype(precision))) +
                  ", variables in float32"
            : "no native kernels on this CPU: computing in float32");
  if (optim::GradScaler* scaler = trainer.grad_scaler(); scaler && meta.contains("grad_scaler"))
    scaler->load_state_dict(meta["grad_scaler"]);
  auto state = std::make_shared<EpochState>(a, out, d.info, *model, *opt, schedule.get(), per_batch,
                                            history, callbacks.stateful, callbacks.early);
  state->set_step(step);
  state->set_grad_scaler(trainer.grad_scaler());
  trainer.add_callback(state);  // last: it saves what the others decided

  train::FitOptions fit_options;
  fit_options.epochs = a.epochs;
  fit_options.initial_epoch = initial_epoch;
  if (meta.contains("stop_reason") && !a.override_settings) {
    std::cout << "The run stopped early after epoch " << initial_epoch << ": "
              << meta["stop_reason"].get<std::string>()
              << "; nothing more to train (pass --override with other --early-stopping or "
                 "--epochs to continue)\n";
    fit_options.initial_epoch = a.epochs;
  }
  fit_options.validation = &val_loader;
  fit_options.is_tty = isatty(STDOUT_FILENO) != 0;
  winsize size{};
  if (fit_options.is_tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0)
    fit_options.columns = size.ws_col;
  fit_options.compile = a.compile;
  fit_options.log_lr = true;
  const auto start = std::chrono::steady_clock::now();
  const train::History fitted = trainer.fit(train_loader, fit_options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const TestReport report = [&] {  // in the precision the run trained in
    std::optional<AutocastGuard> region;
    if (const std::optional<DType> dt = train::precision_compute_dtype(precision))
      region.emplace(*dt);
    return evaluate_classifier(*model, test_loader, d.info.class_names);
  }();
  io::save_safetensors((out / "model.safetensors").string(), model->state_dict(),
                       {{"model", a.model}, {"data", a.data}});
  if (!state->history().metrics.empty())
    train::write_training_curves(state->history(), (out / "curves.svg").string());
  const int epochs_run = static_cast<int>(fitted.epoch.size());
  nlohmann::json metrics = {{"test", report.to_json()}, {"test_name", d.test_name},
                            {"train_seconds", seconds}, {"epochs_run", epochs_run},
                            {"args", args_json(a)},     {"threads", get_num_threads()}};
  if (!fitted.stop_reason.empty()) metrics["stop_reason"] = fitted.stop_reason;
  write_text((out / "metrics.json").string(), metrics.dump(2) + "\n");

  report.print(std::cout);
  if (epochs_run > 0)
    std::cout << fmt::format("Trained {} epoch(s) in {:.1f} s ({:.1f} s/epoch)\n", epochs_run,
                             seconds, seconds / epochs_run);
  std::cout << fmt::format("Test accuracy: {:.2f}% (loss {:.4f}, {} samples, {})\n",
                           100.0 * report.accuracy, report.loss, report.samples, d.test_name);
  std::cout << "Saved in " << out.string()
            << "/: model.safetensors, checkpoint/, history.csv, steps.csv, curves.svg, "
               "summary.txt, validation.json, metrics.json, config.json"
            << (a.checkpoint_best.empty() ? "" : ", best.safetensors") << "\n";
  return 0;
}

}  // namespace kiln::cli
