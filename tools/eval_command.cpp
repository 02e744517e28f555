#include <filesystem>
#include <iostream>
#include <optional>

#include "kiln/kiln.h"
#include "tools/datasets.h"
#include "tools/report.h"
#include "tools/run_dir.h"
#include "tools/train_command.h"

namespace kiln::cli {

int run_eval(const std::string& dir, const std::string& data_dir, int64_t batch_size) {
  const std::string ckpt = (std::filesystem::path(dir) / "checkpoint").string();
  if (!train::checkpoint_exists(ckpt))
    throw Error("[kiln eval] expected a training directory written by `kiln train --out " + dir +
                "`, but " + ckpt + " does not exist");
  const nlohmann::json meta = train::read_checkpoint_metadata(ckpt);
  const RecordedRun run = recorded_run(meta);
  DataArgs data = run.data;
  if (!data_dir.empty()) data.dir = data_dir;
  // Only the test split is evaluated, prepared with the training run's normalization.
  RunData d = load_run_data(data, /*with_train=*/false, &run.info);
  auto model = load_run_model(ckpt, run);
  data::DataLoader loader(d.test, {.batch_size = batch_size});
  // In the precision the run trained (and was tested) in, so the accuracies agree.
  std::optional<AutocastGuard> region;
  if (const std::optional<DType> dt =
          train::precision_compute_dtype(train::parse_precision(run.precision)))
    region.emplace(*dt);
  const TestReport report = evaluate_classifier(*model, loader, run.info.class_names);
  region.reset();
  report.print(std::cout);
  std::cout << fmt::format("{} on {} ({}): accuracy {:.2f}%, loss {:.4f}, {} samples\n", run.model,
                           data.name, d.test_name, 100.0 * report.accuracy, report.loss,
                           report.samples);
  return 0;
}

int run_summary(const std::string& model, const std::string& data) {
  const DataInfo info = data_info(data);
  auto m = make_model_for(model, info);
  std::cout << nn::summary(*m, info.input_shape());
  return 0;
}

}  // namespace kiln::cli
