#include "tools/run_dir.h"

#include <fmt/format.h>

#include <filesystem>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/quantized.h"
#include "kiln/train/checkpoint.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

// What a run writes into its directory; the first four hold its results. The others are written
// again by any run, so alone (a run killed in its first epoch) they protect nothing.
const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {
      "checkpoint", "history.csv", "model.safetensors", "metrics.json",    "config.json",
      "curves.svg", "summary.txt", "steps.csv",         "validation.json", "best.safetensors"};
  return names;
}
constexpr size_t kResultFiles = 4;

std::string flag_of(const std::string& key) {
  std::string f = "--" + key;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

std::string shown(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// The settings that decide a run's numbers, one list for both directions: f(key, member) for each
// (Args is TrainArgs or const TrainArgs).
template <class Args, class F>
void for_each_setting(Args& a, F&& f) {
  f("model", a.model);
  f("data", a.data);
  f("image_size", a.image_size);
  f("channels", a.channels);
  f("resize", a.resize);
  f("label_column", a.label_column);
  f("test_split", a.test_split);
  f("epochs", a.epochs);
  f("batch_size", a.batch_size);
  f("optimizer", a.optimizer);
  f("lr", a.lr);
  f("momentum", a.momentum);
  f("weight_decay", a.weight_decay);
  f("schedule", a.schedule);
  f("label_smoothing", a.label_smoothing);
  f("augment", a.augment);
  f("seed", a.seed);
  f("train_samples", a.train_samples);
  f("validation_split", a.validation_split);
  f("monitor", a.monitor);
  f("early_stopping", a.early_stopping);
  f("checkpoint_best", a.checkpoint_best);
  f("reduce_lr_on_plateau", a.reduce_lr_on_plateau);
  f("lr_factor", a.lr_factor);
  f("precision", a.precision);
}

void assign(TrainArgs& a, const std::string& key, const nlohmann::json& v) {
  for_each_setting(a, [&](const char* name, auto& member) {
    if (key == name) member = v.get<std::decay_t<decltype(member)>>();
  });
}

}  // namespace

nlohmann::json run_settings(const TrainArgs& a) {
  nlohmann::json j = nlohmann::json::object();
  for_each_setting(a, [&](const char* name, const auto& member) { j[name] = member; });
  return j;
}

std::vector<std::string> previous_run_files(const std::string& dir) {
  std::vector<std::string> found;
  for (size_t i = 0; i < kResultFiles; ++i)
    if (fs::exists(fs::path(dir) / run_file_names()[i])) found.push_back(run_file_names()[i]);
  return found;
}

void remove_run_files(const std::string& dir) {
  for (const std::string& name : run_file_names()) fs::remove_all(fs::path(dir) / name);
}

void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos && entry.is_regular_file())
      fs::remove(entry.path(), ec);
  }
}

std::vector<std::string> adopt_recorded_settings(TrainArgs& a, const nlohmann::json& recorded,
                                                 const std::string& dir) {
  const nlohmann::json now = run_settings(a);
  for (const char* key : {"model", "data"})
    if (recorded.contains(key) && a.given.contains(flag_of(key)) && recorded[key] != now[key])
      throw Error(fmt::format(
          "[kiln train] --resume: {} holds a run of --model {} on --data {}, which cannot continue "
          "as --model {} on --data {}; use another --out, or --overwrite without --resume",
          dir, shown(recorded.value("model", nlohmann::json("?"))),
          shown(recorded.value("data", nlohmann::json("?"))), a.model, a.data));
  std::vector<std::string> changes;
  for (const auto& [key, value] : recorded.items()) {
    if (!now.contains(key)) continue;
    if (!a.given.contains(flag_of(key))) {
      assign(a, key, value);
    } else if (now[key] != value && key != "epochs") {  // the total may grow: run_train's check
      changes.push_back(
          fmt::format("{} {} (the run used {})", flag_of(key), shown(now[key]), shown(value)));
    }
  }
  return changes;
}

DataArgs data_args(const TrainArgs& a) {
  return DataArgs{a.data,   a.data_dir,     a.image_size, a.channels,
                  a.resize, a.label_column, a.test_split, a.seed};
}

RecordedRun recorded_run(const nlohmann::json& meta) {
  if (!meta.contains("args") || !meta["args"].is_object())
    throw Error(
        "[kiln] expected the checkpoint's metadata to record the run's settings "
        "(\"args\"), but it does not");
  TrainArgs a;
  const nlohmann::json& recorded = meta["args"];
  try {
    for (const auto& [key, value] : recorded.items()) assign(a, key, value);
    a.data_dir = recorded.value("data_dir", std::string());
  } catch (const nlohmann::json::exception& e) {
    throw Error(
        std::string("[kiln] expected the run's recorded settings to be well formed, but: ") +
        e.what());
  }
  RecordedRun run;
  run.model = a.model;
  run.data = data_args(a);
  run.precision = a.precision;
  run.label_smoothing = a.label_smoothing;
  if (meta.contains("quantization")) run.quantization = meta["quantization"];
  run.info =
      meta.contains("data_info") ? DataInfo::from_json(meta["data_info"]) : data_info(a.data);
  return run;
}

std::shared_ptr<nn::Module> load_run_model(const std::string& checkpoint, const RecordedRun& run,
                                           const std::string& weights) {
  auto model = make_model_for(run.model, run.info);
  if (!run.quantization.is_null()) nn::prepare_quantized(*model, run.quantization);
  if (weights.empty())
    train::load_checkpoint_weights(checkpoint, *model);
  else
    model->load_state_dict(io::load_safetensors(weights).tensors, /*strict=*/true);
  model->eval();
  return model;
}

}  // namespace kiln::cli
