#include "tools/run_dir.h"

#include <fmt/format.h>

#include <filesystem>

#include "kiln/core/error.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

// What a run writes into its directory; the first four hold its results. The others are written
// again by any run, so alone (a run killed in its first epoch) they protect nothing.
const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {"checkpoint",   "history.csv", "model.safetensors",
                                                 "metrics.json", "config.json", "curves.svg",
                                                 "summary.txt"};
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

void assign(TrainArgs& a, const std::string& key, const nlohmann::json& v) {
  if (key == "model")
    a.model = v.get<std::string>();
  else if (key == "data")
    a.data = v.get<std::string>();
  else if (key == "epochs")
    a.epochs = v.get<int>();
  else if (key == "batch_size")
    a.batch_size = v.get<int64_t>();
  else if (key == "optimizer")
    a.optimizer = v.get<std::string>();
  else if (key == "lr")
    a.lr = v.get<double>();
  else if (key == "momentum")
    a.momentum = v.get<double>();
  else if (key == "weight_decay")
    a.weight_decay = v.get<double>();
  else if (key == "schedule")
    a.schedule = v.get<std::string>();
  else if (key == "label_smoothing")
    a.label_smoothing = v.get<double>();
  else if (key == "augment")
    a.augment = v.get<bool>();
  else if (key == "seed")
    a.seed = v.get<uint64_t>();
  else if (key == "train_samples")
    a.train_samples = v.get<int64_t>();
  else if (key == "validation_split")
    a.validation_split = v.get<double>();
}

}  // namespace

nlohmann::json run_settings(const TrainArgs& a) {
  return {{"model", a.model},
          {"data", a.data},
          {"epochs", a.epochs},
          {"batch_size", a.batch_size},
          {"optimizer", a.optimizer},
          {"lr", a.lr},
          {"momentum", a.momentum},
          {"weight_decay", a.weight_decay},
          {"schedule", a.schedule},
          {"label_smoothing", a.label_smoothing},
          {"augment", a.augment},
          {"seed", a.seed},
          {"train_samples", a.train_samples},
          {"validation_split", a.validation_split}};
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

}  // namespace kiln::cli
