// `kiln quantize DIR`: post-training int8 quantization of a run's model (kiln/train/quantize.h),
// written as a new run directory that `kiln eval` and `kiln predict` read like any other, with
// the test accuracy before and after.
#include "tools/quantize_command.h"

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>

#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/kiln.h"
#include "kiln/train/quantize.h"
#include "tools/bundle_commands.h"
#include "tools/datasets.h"
#include "tools/report.h"
#include "tools/run_dir.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

struct Timed {
  TestReport report;
  double seconds = 0.0;
};

Timed timed_eval(nn::Module& model, const std::shared_ptr<const data::Dataset>& test,
                 int64_t batch_size, const std::vector<std::string>& classes) {
  data::DataLoader loader(test, {.batch_size = batch_size});
  const auto start = std::chrono::steady_clock::now();
  Timed t{evaluate_classifier(model, loader, classes), 0.0};
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return t;
}

// The bytes of the regular files at or under `path` (a checkpoint is a directory); 0 when none.
uintmax_t bytes_under(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return fs::file_size(path, ec);
  uintmax_t total = 0;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  return total;
}

std::string default_out(const std::string& dir) {
  fs::path p(dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.string() + "-int8";
}

}  // namespace

int run_quantize(const QuantizeArgs& a) {
  const std::string ckpt = (fs::path(a.dir) / "checkpoint").string();
  if (!train::checkpoint_exists(ckpt))
    throw Error("[kiln quantize] expected a training directory written by `kiln train --out " +
                a.dir + "`, but " + ckpt + " does not exist");
  const train::CheckpointState state = train::read_checkpoint_state(ckpt);
  const RecordedRun run = recorded_run(state.metadata);
  if (!run.quantization.is_null())
    throw Error("[kiln quantize] " + a.dir +
                " is already quantized; quantize the float run it was made from");
  const train::ObserverKind observer = train::parse_observer(a.observer);
  const std::string out = a.out.empty() ? default_out(a.dir) : a.out;
  const std::string out_ckpt = (fs::path(out) / "checkpoint").string();
  if (fs::weakly_canonical(out) == fs::weakly_canonical(a.dir))
    throw Error("[kiln quantize] expected --out to differ from the run directory " + a.dir);
  if (train::checkpoint_exists(out_ckpt) && !a.overwrite)
    throw Error("[kiln quantize] " + out_ckpt +
                " already exists; pass --overwrite to replace it, or choose another --out");

  DataArgs data = run.data;
  if (!a.data_dir.empty()) data.dir = a.data_dir;
  RunData d = load_run_data(data, /*with_train=*/true, &run.info);
  auto model = load_run_model(ckpt, run);

  std::cout << fmt::format("Quantizing {} ({}) to int8: {} calibration samples of {}, {} observer",
                           run.model, a.dir,
                           std::min<int64_t>(a.calibration_samples, d.train->size()), data.name,
                           train::observer_name(observer));
  if (observer == train::ObserverKind::kPercentile)
    std::cout << fmt::format(" ({}th percentile)", a.percentile);
  std::cout << "\n";
  const Timed before = timed_eval(*model, d.test, a.batch_size, run.info.class_names);

  // A fixed random sample of the training split (the first batches of a shuffled epoch), so the
  // result is reproducible.
  const int64_t n = std::min<int64_t>(a.calibration_samples, d.train->size());
  data::DataLoader calibration(
      d.train, {.batch_size = std::min<int64_t>(100, n), .shuffle = true, .seed = a.seed});
  const train::QuantizeResult result =
      train::quantize(*model, calibration,
                      {.calibration_samples = n, .observer = observer, .percentile = a.percentile});
  const Timed after = timed_eval(*model, d.test, a.batch_size, run.info.class_names);

  nlohmann::json report = {{"calibration_samples", result.calibration_samples},
                           {"observer", train::observer_name(observer)},
                           {"percentile", a.percentile},
                           {"layers_quantized", result.layers},
                           {"layers", result.details},
                           {"isa", onednn_cpu_isa()},
                           {"float32",
                            {{"accuracy", before.report.accuracy},
                             {"loss", before.report.loss},
                             {"eval_seconds", before.seconds}}},
                           {"int8",
                            {{"accuracy", after.report.accuracy},
                             {"loss", after.report.loss},
                             {"eval_seconds", after.seconds}}},
                           {"test_samples", after.report.samples}};
  // Note [stripped float weights]: after the evaluations, which ran the model as it will be
  // saved (the int8 forward reads none of the stripped tensors).
  const std::vector<std::string> stripped =
      a.keep_float ? std::vector<std::string>{} : nn::strip_float(*model);
  report["float_stripped"] = !a.keep_float;
  report["stripped_tensors"] = stripped.size();
  nlohmann::json meta = state.metadata;
  meta["quantization"] = nn::quantization_spec(*model);
  meta["quantization_report"] = report;
  meta["quantized_from"] = a.dir;
  fs::create_directories(out);
  optim::SGD unused(model->parameters(), {.lr = 0.0});
  train::save_checkpoint(out_ckpt, *model, unused, nullptr,
                         {.epoch = state.epoch, .step = state.step, .metadata = meta});
  const std::string text = report.dump(2) + "\n";
  io::write_file_atomic((fs::path(out) / "quantization.json").string(),
                        {reinterpret_cast<const uint8_t*>(text.data()), text.size()});

  std::cout << fmt::format(
      "Quantized {} of the model's convolution and linear layers "
      "(oneDNN ISA {}); the rest stays float32\n",
      result.layers, onednn_cpu_isa());
  std::cout << fmt::format("{:<10} {:>10} {:>10} {:>12}\n", "", "accuracy", "loss", "test time");
  std::cout << fmt::format("{:<10} {:>9.2f}% {:>10.4f} {:>11.2f}s\n", "float32",
                           100.0 * before.report.accuracy, before.report.loss, before.seconds);
  std::cout << fmt::format("{:<10} {:>9.2f}% {:>10.4f} {:>11.2f}s\n", "int8",
                           100.0 * after.report.accuracy, after.report.loss, after.seconds);
  std::cout << fmt::format("Accuracy change: {:+.2f} percentage points on {} test samples\n",
                           100.0 * (after.report.accuracy - before.report.accuracy),
                           after.report.samples);
  std::cout << "Saved: " << out_ckpt << " (kiln eval " << out << "), "
            << (fs::path(out) / "quantization.json").string() << "\n";
  const std::string float_weights = (fs::path(a.dir) / "model.safetensors").string();
  std::cout << fmt::format(
      "Size: {:.2f} MB of checkpoint ({}), against the float run's {:.2f} MB of weights "
      "(model.safetensors)\n",
      static_cast<double>(bytes_under(out_ckpt)) / 1e6,
      a.keep_float ? "float32 weights kept (--keep-float)"
                   : fmt::format("{} float32 tensors stripped", stripped.size()),
      static_cast<double>(bytes_under(float_weights)) / 1e6);
  if (!a.bundle.empty()) {
    ExportArgs e;
    e.dir = out;
    e.out = a.bundle;
    e.overwrite = a.overwrite;
    return run_export(e);
  }
  return 0;
}

}  // namespace kiln::cli
