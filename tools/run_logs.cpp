#include "tools/run_logs.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "kiln/io/atomic_file.h"
#include "kiln/train/progress.h"
#include "tools/report.h"

namespace kiln::cli {

void write_text(const std::string& path, const std::string& text) {
  io::write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, "kiln");
}

void write_history_csv(const std::string& path, const train::History& h) {
  std::string text = "epoch";
  size_t rows = 0;
  for (const auto& [name, values] : h.metrics) {
    text += "," + name;
    rows = std::max(rows, values.size());
  }
  text += "\n";
  for (size_t r = 0; r < rows; ++r) {
    text += std::to_string(r + 1);
    for (const auto& [name, values] : h.metrics)
      text += r < values.size() ? fmt::format(",{}", values[r]) : ",";
    text += "\n";
  }
  write_text(path, text);
}

namespace {

constexpr const char* kStepsHeader = "step,epoch,loss,lr,samples_per_second";

// The complete rows of an earlier steps.csv with step <= last (a kill may have left a partial
// last line, or rows of steps after the checkpoint that the resumed run trains again).
std::string kept_steps(const std::string& path, int64_t last) {
  std::ifstream in(path);
  std::string text = std::string(kStepsHeader) + "\n", line;
  if (!in || !std::getline(in, line) || line != kStepsHeader) return text;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: partial
    const int64_t step = std::strtoll(line.c_str(), nullptr, 10);
    if (step < 1 || step > last) break;
    text += line + "\n";
  }
  return text;
}

}  // namespace

StepsCsv::StepsCsv(std::string path, int64_t resumed_step)
    : path_(std::move(path)), step_(resumed_step) {
  write_text(path_,
             resumed_step > 0 ? kept_steps(path_, resumed_step) : std::string(kStepsHeader) + "\n");
  file_.open(path_, std::ios::app);
  if (!file_) throw Error("[kiln train] cannot append to " + path_);
}

void StepsCsv::on_epoch_begin(int epoch) {
  epoch_ = epoch;
  last_ = train::steady_seconds();
}

bool StepsCsv::on_batch_end(int64_t, const train::Logs& logs) {
  const double now = train::steady_seconds();
  const double seconds = now - last_;
  last_ = now;
  const double size = logs.count("size") ? logs.at("size") : 0.0;
  ++step_;
  file_ << fmt::format("{},{},{},{},{:.1f}\n", step_, epoch_ + 1, logs.at("loss"),
                       logs.count("lr") ? logs.at("lr") : 0.0, seconds > 0 ? size / seconds : 0.0)
        << std::flush;
  return false;
}

ValidationReport::ValidationReport(std::string path, std::string split,
                                   std::vector<std::string> class_names)
    : path_(std::move(path)),
      split_(std::move(split)),
      class_names_(std::move(class_names)),
      confusion_(static_cast<int64_t>(class_names_.size())) {}

void ValidationReport::on_epoch_begin(int) {
  confusion_.reset();
  samples_ = 0;
}

void ValidationReport::on_validation_batch_end(const Tensor& logits, const Tensor& target) {
  confusion_.update(logits, target);
  samples_ += logits.size(0);
}

bool ValidationReport::on_epoch_end(int epoch, const train::Logs& logs) {
  if (samples_ == 0) return false;
  TestReport r;
  r.loss = logs.count("val_loss") ? logs.at("val_loss") : 0.0;
  r.accuracy = logs.count("val_accuracy") ? logs.at("val_accuracy") : 0.0;
  r.samples = samples_;
  r.class_names = class_names_;
  r.confusion = confusion_.counts();
  nlohmann::json j = r.to_json();
  j["epoch"] = epoch + 1;
  j["split"] = split_;
  write_text(path_, j.dump() + "\n");
  return false;
}

}  // namespace kiln::cli
