#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::cli {

// A labelled image dataset the `kiln` command knows by name, already normalized with the
// per-channel mean and std of its training split (the usual published constants), so models see
// zero-centred inputs; `mean`/`std` are kept so that augmentation and evaluation agree.
struct DataInfo {
  int64_t channels = 0;
  int64_t image_size = 0;
  std::vector<std::string> class_names;
  std::vector<float> mean, std;  // per channel
  int64_t classes() const { return static_cast<int64_t>(class_names.size()); }
};

struct ImageData {
  std::shared_ptr<data::TensorDataset> train;
  std::shared_ptr<data::TensorDataset> test;
  DataInfo info;
};

// Shapes, classes and normalization of a known dataset, without reading it.
DataInfo data_info(const std::string& name);

// "fashion-mnist" (dir defaults to Debian's /usr/share/datasets/fashion-mnist) or "cifar10"
// (dir holds the files of cifar-10-batches-bin, or is its parent; no default). Errors name the
// dataset and the directory. Without `with_train` only the test split is read (train is null).
ImageData load_image_data(const std::string& name, std::string dir, bool with_train = true);
std::string default_data_dir(const std::string& name);

}  // namespace kiln::cli
