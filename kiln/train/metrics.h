#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::train {

// Weighted running mean of scalars (the epoch loss: each batch's mean loss weighted by its size).
class Mean {
 public:
  void reset() { sum_ = 0.0, weight_ = 0.0; }
  void update(double value, double weight = 1.0) { sum_ += value * weight, weight_ += weight; }
  // 0 before any update.
  double result() const { return weight_ > 0.0 ? sum_ / weight_ : 0.0; }

 private:
  double sum_ = 0.0;
  double weight_ = 0.0;
};

// A streaming classification metric over logits [N, C] and int64 labels [N]. update() reads the
// values only (it records no gradient), so it may be given tensors that require grad.
class Metric {
 public:
  virtual ~Metric() = default;
  // The key under which fit/evaluate report the result ("accuracy").
  virtual std::string name() const = 0;
  virtual void reset() = 0;
  virtual void update(const Tensor& logits, const Tensor& labels,
                      const Loc& loc = Loc::current()) = 0;
  virtual double result() const = 0;
};

// Fraction of samples whose label is among the k largest logits (k = 1: argmax accuracy). Ties
// are broken by the lower class index, as argmax does.
class TopKAccuracy : public Metric {
 public:
  explicit TopKAccuracy(int64_t k = 5, const Loc& loc = Loc::current());
  std::string name() const override;
  void reset() override { correct_ = 0, count_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, const Loc& loc = Loc::current()) override;
  double result() const override;

 private:
  int64_t k_;
  int64_t correct_ = 0;
  int64_t count_ = 0;
};

class Accuracy final : public TopKAccuracy {
 public:
  Accuracy() : TopKAccuracy(1) {}
  std::string name() const override { return "accuracy"; }
};

// Note [macro averages]
// ~~~~~~~~~~~~~~~~~~~~~
// Precision, recall and F1 are computed per class and averaged with equal weight over the
// classes that occur among the labels or the predictions seen so far (scikit-learn's default label
// set); a class whose denominator is zero scores 0 (sklearn's zero_division=0). Per-class F1 is
// 2PR / (P + R), so the macro F1 is the mean of per-class F1s, not F1 of the mean P and R.
class ConfusionMatrix : public Metric {
 public:
  enum class Score { Precision, Recall, F1 };
  // num_classes = 0 takes the class count from the first batch's logits.dim_size(1).
  explicit ConfusionMatrix(int64_t num_classes = 0, Score score = Score::F1,
                           const Loc& loc = Loc::current());
  // "precision", "recall" or "f1".
  std::string name() const override;
  void reset() override;
  void update(const Tensor& logits, const Tensor& labels, const Loc& loc = Loc::current()) override;
  // The score chosen at construction.
  double result() const override;

  double precision() const;
  double recall() const;
  double f1() const;
  int64_t num_classes() const { return num_classes_; }
  // counts()[label * C + predicted].
  const std::vector<int64_t>& counts() const { return counts_; }
  int64_t count(int64_t label, int64_t predicted) const {
    return counts_[static_cast<size_t>(label * num_classes_ + predicted)];
  }

 private:
  // Per-class (precision, recall) over the classes present; returns their count.
  int64_t per_class(std::vector<double>& precision, std::vector<double>& recall) const;

  int64_t num_classes_;
  Score score_;
  std::vector<int64_t> counts_;
};

// "accuracy" (or "acc"), "top<k>_accuracy" ("top5_accuracy"), "precision", "recall", "f1";
// anything else is an Error listing these.
std::unique_ptr<Metric> make_metric(const std::string& name, const Loc& loc = Loc::current());

}  // namespace kiln::train
