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

void write_text(const fs::path& path, const std::string& text) {
  io::write_file_atomic(path.string(), {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                        "kiln");
}

// history.csv, written whole (atomically) from the history the checkpoint holds, right after the
// checkpoint: a kill between the two can no longer lose a row, and a resume rewrites it from the
// checkpoint. Epochs are numbered from 1, as the progress bar counts them.
void write_history_csv(const std::string& path, const train::History& h) {
  std::string text = "epoch";
  size_t rows = 0;
  for (const auto& [name, values] : h.metrics) {
    text += "," + name;
    rows = std::max(rows, values.size());
  }
  text += "\n";
  for (size_t r = 0; r < rows; ++r) {
    text += std::to_string(r + 1);
    for (const auto& [name, values] : h.metrics)
      text += r < values.size() ? fmt::format(",{}", values[r]) : ",";
    text += "\n";
  }
  write_text(path, text);
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

// Saves the full training state after every epoch, steps the LR schedule and keeps the history
// (including epochs from before a resume) for the checkpoint's metadata.
class EpochState final : public train::Callback {
 public:
  EpochState(const TrainArgs& args, std::string dir, std::string csv, nn::Module& model,
             optim::Optimizer& opt, optim::LRScheduler* schedule, bool per_batch,
             train::History history)
      : args_(args),
        dir_(std::move(dir)),
        csv_(std::move(csv)),
        model_(model),
        opt_(opt),
        schedule_(schedule),
        per_batch_(per_batch),
        history_(std::move(history)) {}

  bool on_batch_end(int64_t, const train::Logs&) override {
    ++step_;
    if (schedule_ != nullptr && per_batch_) schedule_->step();
    return false;
  }

  bool on_epoch_end(int epoch, const train::Logs& logs) override {
    if (schedule_ != nullptr && !per_batch_) schedule_->step();
    for (const auto& [name, value] : logs) history_.metrics[name].push_back(value);
    nlohmann::json meta = {{"args", args_json(args_)}, {"history", history_.metrics}};
    train::save_checkpoint(dir_, model_, opt_, schedule_,
                           train::CheckpointState{epoch + 1, step_, meta});
    write_history_csv(csv_, history_);
    on_interrupt_say(interrupt_message(args_, epoch + 1));
    return false;
  }

  const train::History& history() const { return history_; }
  void set_step(int64_t step) { step_ = step; }

 private:
  const TrainArgs& args_;
  std::string dir_, csv_;
  nn::Module& model_;
  optim::Optimizer& opt_;
  optim::LRScheduler* schedule_;
  bool per_batch_;
  train::History history_;
  int64_t step_ = 0;
};

std::shared_ptr<const data::Dataset> augmented(std::shared_ptr<const data::Dataset> ds,
                                               const DataInfo& info) {
  data::Compose stages(
      {data::RandomCrop(info.image_size, info.image_size / 8), data::RandomHorizontalFlip(0.5)});
  return std::make_shared<data::TransformDataset>(std::move(ds), stages);
}

}  // namespace

int run_train(const TrainArgs& args) {
  TrainArgs a = args;
  if (a.epochs < 1)
    throw Error("[kiln train] expected --epochs >= 1, but got " + std::to_string(a.epochs));
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
  int recorded_epochs = a.epochs;
  if (resuming) {
    const nlohmann::json meta = train::read_checkpoint_metadata(ckpt);
    recorded_epochs = meta.at("args").value("epochs", a.epochs);
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
  }

  ImageData d = load_image_data(a.data, a.data_dir);
  if (a.train_samples > 0 && a.train_samples < d.train->size())
    d.train =
        std::make_shared<data::TensorDataset>(d.train->data().narrow(0, 0, a.train_samples),
                                              d.train->target().narrow(0, 0, a.train_samples));
  manual_seed(a.seed);
  auto model = nn::make_model(a.model, d.info.channels, d.info.image_size, d.info.classes());
  const std::string summary =
      nn::summary(*model, {d.info.channels, d.info.image_size, d.info.image_size});
  std::cout << summary;
  write_text(out / "summary.txt", summary);

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
    const nlohmann::json meta = train::read_checkpoint_metadata(ckpt);
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
  write_text(out / "config.json", nlohmann::json{{"settings", args_json(a)}}.dump(2) + "\n");
  train::Trainer trainer(*model, *opt,
                         [&](const Tensor& logits, const Tensor& target) {
                           return cross_entropy(logits, target, Tensor(), -100, Reduction::Mean,
                                                a.label_smoothing);
                         },
                         {"accuracy"});
  const std::string csv = (out / "history.csv").string();
  if (initial_epoch > 0) write_history_csv(csv, history);  // repairs a row a kill lost
  on_interrupt_say(interrupt_message(a, initial_epoch));
  auto state =
      std::make_shared<EpochState>(a, ckpt, csv, *model, *opt, schedule.get(), per_batch, history);
  state->set_step(step);
  trainer.add_callback(state);

  const auto start = std::chrono::steady_clock::now();
  train::FitOptions fit_options;
  fit_options.epochs = a.epochs;
  fit_options.initial_epoch = initial_epoch;
  fit_options.validation = &val_loader;
  fit_options.is_tty = isatty(STDOUT_FILENO) != 0;
  winsize size{};
  if (fit_options.is_tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0)
    fit_options.columns = size.ws_col;
  fit_options.compile = a.compile;
  trainer.fit(train_loader, fit_options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const TestReport report = evaluate_classifier(*model, test_loader, d.info.class_names);
  io::save_safetensors((out / "model.safetensors").string(), model->state_dict(),
                       {{"model", a.model}, {"data", a.data}});
  train::write_training_curves(state->history(), (out / "curves.svg").string());
  const int epochs_run = a.epochs - initial_epoch;
  nlohmann::json metrics = {{"test", report.to_json()},
                            {"train_seconds", seconds},
                            {"epochs_run", epochs_run},
                            {"args", args_json(a)},
                            {"threads", get_num_threads()}};
  write_text(out / "metrics.json", metrics.dump(2) + "\n");

  report.print(std::cout);
  if (epochs_run > 0)
    std::cout << fmt::format("Trained {} epoch(s) in {:.1f} s ({:.1f} s/epoch)\n", epochs_run,
                             seconds, seconds / epochs_run);
  std::cout << fmt::format("Test accuracy: {:.2f}% (loss {:.4f}, {} images)\n",
                           100.0 * report.accuracy, report.loss, report.samples);
  std::cout << "Saved in " << out.string()
            << "/: model.safetensors, checkpoint/, history.csv, curves.svg, summary.txt, "
               "metrics.json\n";
  return 0;
}

}  // namespace kiln::cli
