#pragma once
// What `kiln train` keeps in a run directory and how a later run may use it (issue 16, defects
// 1-3): the resolved settings are recorded, a resumed run takes them from the record and refuses a
// changed one unless told (--override), and an earlier run is never replaced without --overwrite.
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tools/datasets.h"
#include "tools/train_command.h"

namespace kiln::cli {

// The settings that decide a run's numbers, as JSON (the keys of config.json's "settings").
nlohmann::json run_settings(const TrainArgs& a);

// The files holding an earlier run's results found in dir (checkpoint, history.csv,
// model.safetensors, metrics.json), by name; empty when there are none.
std::vector<std::string> previous_run_files(const std::string& dir);

// Removes those files (for --overwrite), and stale "*.tmp.<pid>" files a killed run left.
void remove_run_files(const std::string& dir);
void remove_stale_temporaries(const std::string& dir);

// For --resume: every setting recorded in `recorded` (run_settings of the earlier run) that the
// user did not give on this command line (`a.given`) is taken from the record; one the user gave
// with another value is a change, described as "--lr 0.01 (the run used 0.05)". --model and
// --data may never change (the weights would not fit): that is an error naming both. Returns the
// changes; the caller refuses them without --override.
std::vector<std::string> adopt_recorded_settings(TrainArgs& a, const nlohmann::json& recorded,
                                                 const std::string& dir);

// Where the run's data comes from, from its flags.
DataArgs data_args(const TrainArgs& a);

// What eval and predict need of a run's record (its checkpoint's metadata): the model's name, where
// the data came from and how inputs were prepared. Runs recorded before "data_info" existed get
// their known dataset's DataInfo.
struct RecordedRun {
  std::string model;
  DataArgs data;
  DataInfo info;
  std::string precision = "float32";  // --precision (Note [training precision])
  double label_smoothing = 0.0;       // the loss's, for a bundle's training signature
  // A copy written by `kiln quantize`: nn::quantization_spec of its model; null otherwise.
  nlohmann::json quantization;
};

// The run's model with its recorded weights (made int8 first where the run was quantized), in
// evaluation mode. `weights`, when not empty, is a safetensors file to load instead.
std::shared_ptr<nn::Module> load_run_model(const std::string& checkpoint, const RecordedRun& run,
                                           const std::string& weights = "");
RecordedRun recorded_run(const nlohmann::json& checkpoint_metadata);

}  // namespace kiln::cli
