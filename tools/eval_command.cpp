#include <filesystem>
#include <iostream>

#include "kiln/kiln.h"
#include "tools/datasets.h"
#include "tools/report.h"
#include "tools/train_command.h"

namespace kiln::cli {

int run_eval(const std::string& dir, const std::string& data_dir, int64_t batch_size) {
  const std::string ckpt = (std::filesystem::path(dir) / "checkpoint").string();
  if (!train::checkpoint_exists(ckpt))
    throw Error("[kiln eval] expected a training directory written by `kiln train --out " + dir +
                "`, but " + ckpt + " does not exist");
  const nlohmann::json meta = train::read_checkpoint_metadata(ckpt);
  const auto& args = meta.at("args");
  const std::string data = args.at("data"), model_name = args.at("model");
  ImageData d =
      load_image_data(data, data_dir.empty() ? args.at("data_dir").get<std::string>() : data_dir,
                      /*with_train=*/false);  // only the test split is evaluated
  auto model = nn::make_model(model_name, d.info.channels, d.info.image_size, d.info.classes());
  train::load_checkpoint_weights(ckpt, *model);
  data::DataLoader loader(d.test, {.batch_size = batch_size});
  const TestReport report = evaluate_classifier(*model, loader, d.info.class_names);
  report.print(std::cout);
  std::cout << fmt::format("{} on {} (test split): accuracy {:.2f}%, loss {:.4f}, {} images\n",
                           model_name, data, 100.0 * report.accuracy, report.loss, report.samples);
  return 0;
}

int run_summary(const std::string& model, const std::string& data) {
  const DataInfo info = data_info(data);
  auto m = nn::make_model(model, info.channels, info.image_size, info.classes());
  std::cout << nn::summary(*m, {info.channels, info.image_size, info.image_size});
  return 0;
}

}  // namespace kiln::cli
