#include "tools/predict_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>

#include "kiln/data/csv.h"
#include "kiln/data/image.h"
#include "kiln/io/npy.h"
#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "tools/bundle_commands.h"
#include "tools/datasets.h"
#include "tools/run_dir.h"
#include "tools/run_logs.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// One model input, ready for the model, and where it came from.
struct Sample {
  std::string name;  // "shoe.png", "batch.npy[3]", "rows.csv:12"
  Tensor input;
  int64_t label = -1;  // a CSV row's label column, when present
};

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e;
}

bool is_image(const std::string& ext) {
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// The files an --input names: itself, or a directory's supported files in name order.
std::vector<fs::path> expand(const std::string& input) {
  const fs::path p(input);
  if (fs::is_regular_file(p)) return {p};
  if (!fs::is_directory(p))
    throw Error("[kiln predict] --input " + input + " is neither a file nor a directory");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(p)) {
    const std::string ext = lower_extension(entry.path());
    if (entry.is_regular_file() && (is_image(ext) || ext == ".npy" || ext == ".csv"))
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    throw Error("[kiln predict] --input " + input +
                " holds no .png, .jpg, .jpeg, .npy or .csv files");
  return files;
}

// An array of images in [0, 1] (uint8 arrays are divided by 255) as [N, C, H, W]: [H, W] is one
// gray image, [C, H, W] with C = 1 or 3 one image, another [N, H, W] N gray ones.
Tensor npy_images(Tensor a, const std::string& name) {
  a = a.dtype() == DType::UInt8 ? div(a.to(DType::Float32), scalar_tensor(255.0))
                                : a.to(DType::Float32);
  if (a.dim() == 2) return unsqueeze(unsqueeze(a, 0), 0);
  if (a.dim() == 3) return (a.size(0) == 1 || a.size(0) == 3) ? unsqueeze(a, 0) : unsqueeze(a, 1);
  if (a.dim() == 4) return a;
  throw Error(
      fmt::format("[kiln predict] expected {} to hold images ([H, W], [C, H, W] or "
                  "[N, C, H, W]), but got shape {}",
                  name, shape_str(a.shape())));
}

void read_file(const fs::path& path, const DataInfo& info, const std::string& label_column,
               std::vector<Sample>& out) {
  const std::string ext = lower_extension(path), name = path.filename().string();
  auto add = [&](std::string n, const Tensor& raw, int64_t label = -1) {
    try {
      out.push_back({std::move(n), prepare_input(raw, info), label});
    } catch (const Error& e) {
      throw Error("[kiln predict] " + path.string() + ": " + e.what());
    }
  };
  if (is_image(ext)) {
    if (info.kind == "table")
      throw Error("[kiln predict] " + path.string() +
                  " is an image, but the model reads table "
                  "rows of " +
                  std::to_string(info.features) + " features (.csv or .npy)");
    const Tensor pixels = data::decode_image(path.string());
    add(name, div(pixels.to(DType::Float32), scalar_tensor(255.0)));
  } else if (ext == ".npy") {
    Tensor a = io::read_npy(path.string());
    if (info.kind == "table") {
      a = a.to(DType::Float32);
      if (a.dim() == 1) a = unsqueeze(a, 0);
      if (a.dim() != 2)
        throw Error(fmt::format("[kiln predict] expected {} to hold rows [N, {}], but got shape {}",
                                path.string(), info.features, shape_str(a.shape())));
      for (int64_t r = 0; r < a.size(0); ++r) add(fmt::format("{}[{}]", name, r), a.select(0, r));
    } else {
      const Tensor images = npy_images(a, path.string());
      for (int64_t i = 0; i < images.size(0); ++i)
        add(images.size(0) == 1 ? name : fmt::format("{}[{}]", name, i), images.select(0, i));
    }
  } else if (ext == ".csv") {
    if (info.kind != "table")
      throw Error("[kiln predict] " + path.string() +
                  " is a table, but the model reads images (.png, .jpg or .npy)");
    data::CsvOptions o;
    const auto plain = data::read_csv(path.string(), o);  // every column, to see which are there
    Tensor rows = plain->data(), labels;
    if (rows.size(1) == info.features + 1) {  // the label column too: reported as the truth
      o.target_column = label_column;
      const auto labelled = data::read_csv(path.string(), o);
      rows = labelled->data();
      labels = labelled->target();
    }
    for (int64_t r = 0; r < rows.size(0); ++r)
      add(fmt::format("{}:{}", name, r + 2), rows.select(0, r),
          labels.defined() ? labels.select(0, r).item<int64_t>() : -1);
  } else {
    throw Error("[kiln predict] " + path.string() +
                ": expected a .png, .jpg, .jpeg, .npy or .csv file");
  }
}

struct Prediction {
  std::vector<int64_t> classes;
  std::vector<double> probabilities;
};

// What predict needs of a run or a bundle: how inputs are prepared, and the logits of a batch.
struct Classifier {
  DataInfo info;
  std::string label_column = "label";
  std::function<Tensor(const Tensor&)> logits;
};

Classifier run_classifier(const PredictArgs& a) {
  const std::string ckpt = (fs::path(a.dir) / "checkpoint").string();
  if (!train::checkpoint_exists(ckpt))
    throw Error("[kiln predict] expected a training directory written by `kiln train --out " +
                a.dir + "` or a bundle written by `kiln export`, but " + ckpt +
                " does not exist and there is no saved_model.json");
  const RecordedRun run = recorded_run(train::read_checkpoint_metadata(ckpt));
  std::shared_ptr<nn::Module> model = load_run_model(ckpt, run, a.weights);
  // In the precision the run trained in (softmax runs in float32 under autocast).
  const std::optional<DType> dt =
      train::precision_compute_dtype(train::parse_precision(run.precision));
  return {run.info, run.data.label_column, [model, dt](const Tensor& x) {
            std::optional<AutocastGuard> region;
            if (dt) region.emplace(*dt);
            return (*model)(x);
          }};
}

// A bundle carries its data description (assets/data_info.json) and computes in the precision
// it was exported in; its logits are read as float32.
Classifier bundle_classifier(const PredictArgs& a) {
  if (!a.weights.empty())
    throw Error("[kiln predict] --weights applies to a training directory; " + a.dir +
                " is a bundle, whose weights are part of it");
  auto bundle = std::make_shared<io::SavedModel>(io::load_model(a.dir));
  Classifier c;
  try {
    c.info = DataInfo::from_json(nlohmann::json::parse(bundle->asset("data_info.json")));
  } catch (const nlohmann::json::exception& e) {
    throw Error("[kiln predict] " + a.dir +
                "/assets/data_info.json is not valid JSON: " + e.what());
  }
  const nlohmann::json& meta = bundle->info().metadata;
  if (meta.contains("label_column") && meta["label_column"].is_string())
    c.label_column = meta["label_column"];
  c.logits = [bundle](const Tensor& x) { return (*bundle)({x})[0].to(DType::Float32); };
  return c;
}

}  // namespace

int run_predict(const PredictArgs& a) {
  const Classifier model = is_bundle_dir(a.dir) ? bundle_classifier(a) : run_classifier(a);
  const DataInfo& info = model.info;
  const std::string out_ext = lower_extension(a.out);
  if (!a.out.empty() && out_ext != ".json" && out_ext != ".csv")
    throw Error("[kiln predict] expected --out to end in .json or .csv, but got " + a.out);
  const int64_t k = std::min<int64_t>(a.top_k, info.classes());

  std::vector<Sample> samples;
  for (const std::string& input : a.inputs)
    for (const fs::path& file : expand(input)) read_file(file, info, model.label_column, samples);

  NoGradGuard no_grad;
  std::vector<Prediction> predictions;
  for (size_t begin = 0; begin < samples.size(); begin += static_cast<size_t>(a.batch_size)) {
    const size_t end = std::min(samples.size(), begin + static_cast<size_t>(a.batch_size));
    std::vector<Tensor> batch;
    for (size_t i = begin; i < end; ++i) batch.push_back(samples[i].input);
    const Tensor probs = softmax(model.logits(stack(batch, 0)), 1);
    const int64_t classes = probs.size(1);
    const std::vector<float> p = contiguous(probs).to_vector<float>();
    for (size_t i = 0; i < end - begin; ++i) {
      std::vector<int64_t> order(static_cast<size_t>(classes));
      for (int64_t c = 0; c < classes; ++c) order[static_cast<size_t>(c)] = c;
      const float* row = p.data() + i * static_cast<size_t>(classes);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t x, int64_t y) { return row[x] > row[y]; });
      Prediction pr;
      for (int64_t r = 0; r < k; ++r) {
        pr.classes.push_back(order[static_cast<size_t>(r)]);
        pr.probabilities.push_back(row[order[static_cast<size_t>(r)]]);
      }
      predictions.push_back(std::move(pr));
    }
  }

  size_t width = 5;
  for (const Sample& s : samples) width = std::max(width, s.name.size());
  int64_t labelled = 0, correct = 0;
  nlohmann::json json = nlohmann::json::array();
  std::string csv = "input,rank,class,index,probability\n";
  for (size_t i = 0; i < samples.size(); ++i) {
    const Prediction& pr = predictions[i];
    std::string line = fmt::format("{:<{}}", samples[i].name, width);
    nlohmann::json top = nlohmann::json::array();
    for (size_t r = 0; r < pr.classes.size(); ++r) {
      const std::string& cls = info.class_names[static_cast<size_t>(pr.classes[r])];
      line += fmt::format("  {}. {} {:.2f}%", r + 1, cls, 100.0 * pr.probabilities[r]);
      top.push_back(
          {{"class", cls}, {"index", pr.classes[r]}, {"probability", pr.probabilities[r]}});
      csv += fmt::format("\"{}\",{},\"{}\",{},{}\n", samples[i].name, r + 1, cls, pr.classes[r],
                         pr.probabilities[r]);
    }
    nlohmann::json entry = {{"input", samples[i].name}, {"top", top}};
    if (samples[i].label >= 0) {
      entry["label"] = samples[i].label;
      ++labelled;
      correct += samples[i].label == pr.classes[0];
    }
    json.push_back(entry);
    std::cout << line << '\n';
  }
  if (labelled > 0)
    std::cout << fmt::format("Accuracy on the {} labelled rows: {:.2f}%\n", labelled,
                             100.0 * static_cast<double>(correct) / static_cast<double>(labelled));
  if (!a.out.empty()) {
    write_text(a.out, out_ext == ".json" ? json.dump(2) + "\n" : csv);
    std::cout << "Wrote " << samples.size() << " prediction(s) to " << a.out << '\n';
  }
  return 0;
}

}  // namespace kiln::cli
