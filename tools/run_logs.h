#pragma once
// The files a training run keeps up to date while it trains, for people and for `kiln board`:
// history.csv (per epoch), steps.csv (per optimizer step) and validation.json (the latest epoch's
// validation: confusion matrix and per-class scores). Each is safe to read at any moment:
// history.csv and validation.json are replaced atomically; steps.csv is appended line by line and
// flushed, so at most its last line is partial.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/train/callbacks.h"
#include "kiln/train/fit.h"
#include "kiln/train/metrics.h"

namespace kiln::cli {

// Writes `text` to `path` atomically (a reader sees the old file or the new one).
void write_text(const std::string& path, const std::string& text);

// history.csv, whole, from the history the checkpoint holds: "epoch,<metrics in name order>",
// epochs numbered from 1 as the progress bar counts them. Written right after the checkpoint, so
// a kill between the two loses no row, and a resume rewrites it from the checkpoint.
void write_history_csv(const std::string& path, const train::History& history);

// steps.csv: "step,epoch,loss,lr,samples_per_second", one row per optimizer step (step and
// epoch from 1; samples/s of that step alone, from the end of the previous step or the epoch's
// start). A run resumed after step k keeps the rows up to k (those the checkpoint covers) and
// appends from there; a new run starts the file afresh.
class StepsCsv final : public train::Callback {
 public:
  StepsCsv(std::string path, int64_t resumed_step);
  std::string name() const override { return "StepsCsv"; }
  void on_epoch_begin(int epoch) override;
  bool on_batch_end(int64_t batch, const train::Logs& logs) override;

 private:
  std::string path_;
  std::ofstream file_;
  int64_t step_;
  int epoch_ = 0;
  double last_ = 0.0;
};

// validation.json after every epoch: {"epoch" (from 1), "split", "loss", "accuracy", "samples",
// "class_names", "confusion" (row-major, rows true class), "per_class"}, from the batches fit's
// validation ran (no second pass over the data).
class ValidationReport final : public train::Callback {
 public:
  ValidationReport(std::string path, std::string split, std::vector<std::string> class_names);
  std::string name() const override { return "ValidationReport"; }
  void on_epoch_begin(int epoch) override;
  void on_validation_batch_end(const Tensor& logits, const Tensor& target) override;
  bool on_epoch_end(int epoch, const train::Logs& logs) override;

 private:
  std::string path_, split_;
  std::vector<std::string> class_names_;
  train::ConfusionMatrix confusion_;
  int64_t samples_ = 0;
};

}  // namespace kiln::cli
