#pragma once
// The data a `kiln` command trains on, evaluates or predicts: a known dataset by name
// (fashion-mnist, cifar10), or the user's own (image-folder: a class per subfolder; csv: a numeric
// table with a label column). What a model needs to know about its inputs (shapes, classes,
// normalization) is a DataInfo, recorded in the run directory so that eval and predict prepare
// new inputs exactly as training did, without reading the training data again.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/nn/module.h"

namespace kiln::cli {

struct DataInfo {
  std::string kind = "images";     // "images" ([C, H, W] inputs) or "table" ([F] inputs)
  int64_t channels = 0;            // images
  int64_t image_size = 0;          // images: H = W
  std::string resize = "stretch";  // image-folder: "stretch" to size x size, or "crop" (the
                                   // shorter side to size, then the centre square)
  int64_t features = 0;            // table
  std::vector<std::string> class_names;
  // Per channel (images) or per feature (table): inputs are (x - mean) / std, with images in
  // [0, 1] before that. Known datasets use their published constants; the user's data the
  // statistics of its training part.
  std::vector<float> mean, std;

  int64_t classes() const { return static_cast<int64_t>(class_names.size()); }
  // [C, H, W] or [F].
  Shape input_shape() const;
  nlohmann::json to_json() const;
  // Errors name what is missing or malformed in `j` (a run's record).
  static DataInfo from_json(const nlohmann::json& j);
};

// Where the data comes from: the flags of `kiln train` that choose it.
struct DataArgs {
  std::string name = "fashion-mnist";  // fashion-mnist, cifar10, image-folder, csv
  std::string dir;                     // a directory, or the CSV file; empty: the default
  int64_t image_size = 32;             // image-folder
  int64_t channels = 3;                // image-folder: 1 (gray) or 3 (RGB)
  std::string resize = "stretch";      // image-folder
  std::string label_column = "label";  // csv
  // image-folder without train/ and test/ (or val/) subfolders, and csv: this fraction of the
  // samples, drawn with `seed`, is held out as the test split.
  double test_split = 0.2;
  uint64_t seed = 0;
};

struct RunData {
  std::shared_ptr<const data::Dataset> train;  // null unless asked for
  std::shared_ptr<const data::Dataset> test;
  DataInfo info;
  std::string test_name;  // "test split", "test/", "20% held out of DIR", for messages
};

// Reads the data, normalized (see DataInfo). Without `with_train` only what the test split needs
// is read (the training part is still scanned where the held-out split is drawn from it).
// `known` is the DataInfo a run recorded: its normalization is used instead of recomputing it.
// Errors name the dataset, the path and what was expected there.
RunData load_run_data(const DataArgs& args, bool with_train = true,
                      const DataInfo* known = nullptr);

// Shapes, classes and normalization of a known dataset by name, without reading it (an Error
// for the user's data, whose shapes come from the data).
DataInfo data_info(const std::string& name);
std::string default_data_dir(const std::string& name);

// The model zoo's `name` built for the data's inputs and classes: every model for images, only
// "mlp" for tables (an Error naming the choices otherwise).
std::shared_ptr<nn::Module> make_model_for(const std::string& name, const DataInfo& info);

// Preprocesses one input the way the data was prepared for training: an image [C, H, W] in [0, 1]
// (any size; resized and converted as info says) or a table row [F] (raw feature values); the
// result is normalized and ready for the model (add the batch dim).
Tensor prepare_input(const Tensor& raw, const DataInfo& info);

}  // namespace kiln::cli
