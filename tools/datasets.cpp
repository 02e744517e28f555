#include "tools/datasets.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "kiln/core/error.h"
#include "kiln/data/cifar.h"
#include "kiln/data/csv.h"
#include "kiln/data/image_folder.h"
#include "kiln/data/subset.h"
#include "kiln/nn/models.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/interpolate.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// (x - mean) / std with mean and std shaped to broadcast over x ([C, 1, 1] or [F]).
std::function<Tensor(const Tensor&)> normalizer(const DataInfo& info) {
  const bool images = info.kind == "images";
  const Shape shape = images ? Shape{static_cast<int64_t>(info.mean.size()), 1, 1}
                             : Shape{static_cast<int64_t>(info.mean.size())};
  Tensor mean = tensor<float>(info.mean, shape), std = tensor<float>(info.std, shape);
  return [mean, std](const Tensor& x) { return div(sub(x, mean), std); };
}

std::shared_ptr<const data::Dataset> transformed(std::shared_ptr<const data::Dataset> ds,
                                                 std::function<Tensor(const Tensor&)> f) {
  return std::make_shared<data::TransformDataset>(
      std::move(ds),
      [f = std::move(f)](const Tensor& x, const data::SampleContext&) { return f(x); });
}

// An image [C, H, W] at size x size: stretched, or its shorter side scaled to size and the
// centre square cut out (bilinear, as the image folder's own resize).
Tensor fit_image(const Tensor& x, int64_t size, const std::string& resize) {
  const int64_t h = x.size(1), w = x.size(2);
  if (h == size && w == size) return x;
  InterpolateOptions o;
  o.mode = "bilinear";
  if (resize == "crop") {
    const double scale = static_cast<double>(size) / static_cast<double>(std::min(h, w));
    const auto sh = std::max<int64_t>(size, std::llround(static_cast<double>(h) * scale));
    const auto sw = std::max<int64_t>(size, std::llround(static_cast<double>(w) * scale));
    o.size = std::make_pair(sh, sw);
    Tensor scaled = squeeze(interpolate(unsqueeze(x, 0), o), 0);
    return contiguous(narrow(narrow(scaled, 1, (sh - size) / 2, size), 2, (sw - size) / 2, size));
  }
  o.size = std::make_pair(size, size);
  return squeeze(interpolate(unsqueeze(x, 0), o), 0);
}

// Per-channel mean and std (population) of up to 256 evenly spaced samples of `ds`.
void image_statistics(const data::Dataset& ds, DataInfo& info) {
  const int64_t n = ds.size(), take = std::min<int64_t>(n, 256);
  std::vector<double> sum(static_cast<size_t>(info.channels)), sq(sum.size());
  double count = 0;
  for (int64_t k = 0; k < take; ++k) {
    const Tensor x = ds.get(k * n / take).data;
    const std::vector<float> v = contiguous(x).to_vector<float>();
    const size_t plane = v.size() / sum.size();
    for (size_t c = 0; c < sum.size(); ++c)
      for (size_t i = 0; i < plane; ++i) {
        sum[c] += v[c * plane + i];
        sq[c] += static_cast<double>(v[c * plane + i]) * v[c * plane + i];
      }
    count += static_cast<double>(plane);
  }
  info.mean.clear();
  info.std.clear();
  for (size_t c = 0; c < sum.size(); ++c) {
    const double m = sum[c] / count, var = std::max(sq[c] / count - m * m, 0.0);
    info.mean.push_back(static_cast<float>(m));
    info.std.push_back(static_cast<float>(var > 1e-12 ? std::sqrt(var) : 1.0));
  }
}

RunData known_dataset(const DataArgs& a, bool with_train) {
  RunData d;
  d.info = data_info(a.name);
  std::string dir = a.dir.empty() ? default_data_dir(a.name) : a.dir;
  if (dir.empty() && a.name == "cifar10")
    throw Error(
        "[kiln] --data cifar10 needs --data-dir: the directory of CIFAR-10's binary version "
        "(cifar-10-batches-bin, with data_batch_1.bin ... data_batch_5.bin and test_batch.bin, as "
        "unpacked from https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz), or its parent");
  auto read = [&](const std::string& split) -> std::shared_ptr<const data::Dataset> {
    auto ds = a.name == "cifar10" ? data::cifar10(dir, split) : data::fashion_mnist(dir, split);
    const auto norm = normalizer(d.info);
    return std::make_shared<data::TensorDataset>(norm(ds->data()), ds->target());
  };
  if (with_train) d.train = read("train");
  d.test = read("test");
  d.test_name = "test split";
  return d;
}

RunData image_folder_data(const DataArgs& a, bool with_train, const DataInfo* known) {
  const fs::path root(a.dir);
  if (a.dir.empty() || !fs::is_directory(root))
    throw Error(
        "[kiln] --data image-folder expects --data-dir DIR, a directory with a subfolder "
        "of images per class (or train/ and test/ such directories), but got \"" +
        a.dir + "\"" + (a.dir.empty() ? "" : " (not a directory)"));
  if (a.channels != 1 && a.channels != 3)
    throw Error(fmt::format("[kiln] expected --channels 1 or 3, but got {}", a.channels));
  fs::path train_root = root, test_root;
  if (fs::is_directory(root / "train")) {
    train_root = root / "train";
    for (const char* name : {"test", "val", "validation"})
      if (test_root.empty() && fs::is_directory(root / name)) test_root = root / name;
    if (test_root.empty())
      throw Error("[kiln] --data image-folder: " + root.string() +
                  " has train/ but no test/ or val/ beside it; add one, or point --data-dir at "
                  "train/ to hold out --test-split of it");
  }
  data::ImageFolderOptions o;
  o.mode = a.channels == 1 ? data::ImageMode::Gray : data::ImageMode::RGB;
  if (a.resize == "stretch")
    o.size = std::make_pair(a.image_size, a.image_size);
  else
    o.allow_mixed_sizes = true;  // fit_image crops each to the square
  auto train_folder = data::image_folder(train_root.string(), o);
  RunData d;
  d.info.kind = "images";
  d.info.channels = a.channels;
  d.info.image_size = a.image_size;
  d.info.resize = a.resize;
  d.info.class_names = train_folder->class_names();
  std::shared_ptr<const data::Dataset> train = train_folder, test;
  if (!test_root.empty()) {
    auto test_folder = data::image_folder(test_root.string(), o);
    if (test_folder->class_names() != d.info.class_names)
      throw Error(
          fmt::format("[kiln] --data image-folder: the classes of {} ({}) differ from "
                      "those of {} ({})",
                      test_root.string(), fmt::join(test_folder->class_names(), ", "),
                      train_root.string(), fmt::join(d.info.class_names, ", ")));
    test = test_folder;
    d.test_name = test_root.string();
  } else {
    auto [rest, held] = data::random_split(train, a.test_split, a.seed);
    train = rest;
    test = held;
    d.test_name = fmt::format("{:g}% of {} held out", 100 * a.test_split, train_root.string());
  }
  if (a.resize == "crop") {
    const auto crop = [n = a.image_size](const Tensor& x) { return fit_image(x, n, "crop"); };
    train = transformed(train, crop);
    test = transformed(test, crop);
  }
  if (known != nullptr) {
    d.info.mean = known->mean;
    d.info.std = known->std;
  } else {
    image_statistics(*train, d.info);
  }
  const auto norm = normalizer(d.info);
  if (with_train) d.train = transformed(train, norm);
  d.test = transformed(test, norm);
  return d;
}

RunData csv_data(const DataArgs& a, const DataInfo* known) {
  if (a.dir.empty() || !fs::is_regular_file(a.dir))
    throw Error(
        "[kiln] --data csv expects --data-dir FILE, a CSV file with a header and a label "
        "column (--label-column, default \"label\"), but got \"" +
        a.dir + "\"" + (a.dir.empty() ? "" : " (not a file)"));
  data::CsvOptions o;
  o.target_column = a.label_column;
  auto all = data::read_csv(a.dir, o);
  const std::vector<int64_t> labels = all->target().to_vector<int64_t>();
  const int64_t low = *std::min_element(labels.begin(), labels.end());
  const int64_t high = *std::max_element(labels.begin(), labels.end());
  if (low < 0 || high > 100000)
    throw Error(
        fmt::format("[kiln] --data csv: expected class labels 0, 1, ... in column \"{}\" "
                    "of {}, but got values from {} to {}",
                    a.label_column, a.dir, low, high));
  RunData d;
  d.info.kind = "table";
  d.info.features = all->data().size(1);
  for (int64_t c = 0; c <= high; ++c) d.info.class_names.push_back(std::to_string(c));
  auto [rest, held] = data::random_split(all, a.test_split, a.seed);
  if (known != nullptr) {
    d.info.mean = known->mean;
    d.info.std = known->std;
  } else {
    const std::vector<int64_t>& idx = rest->indices();
    const Tensor rows = index_select(all->data(), 0, tensor<int64_t>(idx));
    d.info.mean = mean(rows, {0}).to_vector<float>();
    d.info.std = std(rows, {0}, /*correction=*/0).to_vector<float>();
    for (float& s : d.info.std)
      if (!(s > 1e-12f)) s = 1.0f;  // a constant feature stays at 0 after centring
  }
  const auto norm = normalizer(d.info);
  d.train = transformed(rest, norm);
  d.test = transformed(held, norm);
  d.test_name = fmt::format("{:g}% of {} held out", 100 * a.test_split, a.dir);
  return d;
}

}  // namespace

Shape DataInfo::input_shape() const {
  if (kind == "table") return {features};
  return {channels, image_size, image_size};
}

nlohmann::json DataInfo::to_json() const {
  return {{"kind", kind},
          {"channels", channels},
          {"image_size", image_size},
          {"resize", resize},
          {"features", features},
          {"class_names", class_names},
          {"mean", mean},
          {"std", std}};
}

DataInfo DataInfo::from_json(const nlohmann::json& j) {
  DataInfo d;
  try {
    d.kind = j.at("kind").get<std::string>();
    d.channels = j.at("channels").get<int64_t>();
    d.image_size = j.at("image_size").get<int64_t>();
    d.resize = j.at("resize").get<std::string>();
    d.features = j.at("features").get<int64_t>();
    d.class_names = j.at("class_names").get<std::vector<std::string>>();
    d.mean = j.at("mean").get<std::vector<float>>();
    d.std = j.at("std").get<std::vector<float>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("[kiln] expected the run's data description (\"data_info\"), but it "
                            "is malformed: ") +
                e.what());
  }
  const size_t stats =
      d.kind == "table" ? static_cast<size_t>(d.features) : static_cast<size_t>(d.channels);
  if ((d.kind != "images" && d.kind != "table") || d.class_names.empty() ||
      d.mean.size() != stats || d.std.size() != stats)
    throw Error(
        "[kiln] expected the run's data description (\"data_info\") to be consistent, "
        "but got " +
        j.dump());
  return d;
}

DataInfo data_info(const std::string& name) {
  if (name == "fashion-mnist")
    return DataInfo{"images",
                    1,
                    28,
                    "stretch",
                    0,
                    {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                     "Sneaker", "Bag", "Ankle boot"},
                    {0.2860f},
                    {0.3530f}};
  if (name == "cifar10")
    return DataInfo{
        "images",
        3,
        32,
        "stretch",
        0,
        {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"},
        {0.4914f, 0.4822f, 0.4465f},
        {0.2470f, 0.2435f, 0.2616f}};
  throw Error("[kiln] expected --data fashion-mnist, cifar10, image-folder or csv, but got \"" +
              name + "\"");
}

std::string default_data_dir(const std::string& name) {
  if (name == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  return "";
}

RunData load_run_data(const DataArgs& a, bool with_train, const DataInfo* known) {
  RunData d;
  if (a.name == "image-folder")
    d = image_folder_data(a, with_train, known);
  else if (a.name == "csv")
    d = csv_data(a, known);
  else
    d = known_dataset(a, with_train);
  if (!with_train) d.train = nullptr;
  if (known != nullptr && known->class_names != d.info.class_names)
    throw Error(
        fmt::format("[kiln] the data's classes ({}) are not those the model was trained "
                    "on ({})",
                    fmt::join(d.info.class_names, ", "), fmt::join(known->class_names, ", ")));
  return d;
}

std::shared_ptr<nn::Module> make_model_for(const std::string& name, const DataInfo& info) {
  if (info.kind == "table") {
    if (name != "mlp")
      throw Error("[kiln] --model " + name +
                  " needs images; a table (--data csv) trains --model mlp");
    return nn::mlp(info.features, {256}, info.classes());
  }
  return nn::make_model(name, info.channels, info.image_size, info.classes());
}

Tensor prepare_input(const Tensor& raw, const DataInfo& info) {
  const auto norm = normalizer(info);
  if (info.kind == "table") {
    if (raw.dim() != 1 || raw.size(0) != info.features)
      throw Error(fmt::format("[kiln] expected a row of {} features, but got shape {}",
                              info.features, shape_str(raw.shape())));
    return norm(raw);
  }
  if (raw.dim() != 3 || (raw.size(0) != 1 && raw.size(0) != 3))
    throw Error(fmt::format("[kiln] expected an image [C, H, W] with C = 1 or 3, but got shape {}",
                            shape_str(raw.shape())));
  Tensor x = raw;
  if (x.size(0) == 3 && info.channels == 1) {  // ITU-R 601-2 luma, as PIL's convert("L")
    Tensor w = tensor<float>({0.299f, 0.587f, 0.114f}, Shape{3, 1, 1});
    x = sum(mul(x, w), {0}, /*keepdim=*/true);
  } else if (x.size(0) == 1 && info.channels == 3) {
    x = contiguous(expand(x, {3, x.size(1), x.size(2)}));
  }
  return norm(fit_image(x, info.image_size, info.resize));
}

}  // namespace kiln::cli
