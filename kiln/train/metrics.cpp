#include "kiln/train/metrics.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"

namespace kiln::train {
namespace {

struct Batch {
  int64_t n = 0;
  int64_t classes = 0;
  std::vector<double> logits;  // row-major [n, classes]
  std::vector<int64_t> labels;
};

// Validates logits [N, C] against int64 labels [N] in range and copies both out.
Batch read_batch(std::string_view op, const Tensor& logits, const Tensor& labels, const Loc& loc) {
  if (!logits.defined() || !labels.defined())
    fail(op, loc, "expected defined logits and labels, but got an undefined tensor");
  if (logits.dim() != 2)
    fail(op, loc, "expected logits of rank 2 [N, C], but got {}", logits.describe());
  if (labels.dtype() != DType::Int64 || labels.dim() != 1 ||
      labels.dim_size(0) != logits.dim_size(0))
    fail(op, loc, "expected int64 labels [N] matching logits {}, but got {}", logits.describe(),
         labels.describe());
  if (!is_floating(logits.dtype()))
    fail(op, loc, "expected floating-point logits, but got {}", logits.describe());
  NoGradGuard no_grad;
  Batch batch;
  batch.n = logits.dim_size(0);
  batch.classes = logits.dim_size(1);
  batch.logits = logits.detach().to_vector<double>(loc);
  batch.labels = labels.to_vector<int64_t>(loc);
  for (int64_t label : batch.labels)
    if (label < 0 || label >= batch.classes)
      fail(op, loc, "expected labels in [0, {}), but got {} (logits {})", batch.classes, label,
           logits.describe());
  return batch;
}

int64_t argmax_row(const double* row, int64_t classes) {
  int64_t best = 0;
  for (int64_t c = 1; c < classes; ++c)
    if (row[c] > row[best]) best = c;
  return best;
}

}  // namespace

TopKAccuracy::TopKAccuracy(int64_t k, const Loc& loc) : k_(k) {
  if (k < 1) fail("TopKAccuracy", loc, "expected k >= 1, but got {}", k);
}

std::string TopKAccuracy::name() const {
  return "top" + std::to_string(k_) + "_accuracy";
}

void TopKAccuracy::update(const Tensor& logits, const Tensor& labels, const Loc& loc) {
  const Batch b = read_batch(name(), logits, labels, loc);
  for (int64_t i = 0; i < b.n; ++i) {
    const double* row = b.logits.data() + i * b.classes;
    const int64_t label = b.labels[static_cast<size_t>(i)];
    // The label is in the top k when fewer than k classes rank above it; a class with an equal
    // logit ranks above it when its index is lower (argmax's tie rule).
    int64_t above = 0;
    for (int64_t c = 0; c < b.classes; ++c)
      if (row[c] > row[label] || (row[c] == row[label] && c < label)) ++above;
    if (above < k_) ++correct_;
  }
  count_ += b.n;
}

double TopKAccuracy::result() const {
  return count_ > 0 ? static_cast<double>(correct_) / static_cast<double>(count_) : 0.0;
}

ConfusionMatrix::ConfusionMatrix(int64_t num_classes, Score score, const Loc& loc)
    : num_classes_(num_classes), score_(score) {
  if (num_classes < 0)
    fail("ConfusionMatrix", loc, "expected num_classes >= 0, but got {}", num_classes);
  reset();
}

std::string ConfusionMatrix::name() const {
  switch (score_) {
    case Score::Precision:
      return "precision";
    case Score::Recall:
      return "recall";
    case Score::F1:
      break;
  }
  return "f1";
}

void ConfusionMatrix::reset() {
  counts_.assign(static_cast<size_t>(num_classes_ * num_classes_), 0);
}

void ConfusionMatrix::update(const Tensor& logits, const Tensor& labels, const Loc& loc) {
  const Batch b = read_batch("ConfusionMatrix", logits, labels, loc);
  if (num_classes_ == 0) {
    num_classes_ = b.classes;
    reset();
  }
  if (b.classes != num_classes_)
    fail("ConfusionMatrix", loc, "expected logits with {} classes, but got {}", num_classes_,
         logits.describe());
  for (int64_t i = 0; i < b.n; ++i) {
    const int64_t predicted = argmax_row(b.logits.data() + i * b.classes, b.classes);
    ++counts_[static_cast<size_t>(b.labels[static_cast<size_t>(i)] * num_classes_ + predicted)];
  }
}

int64_t ConfusionMatrix::per_class(std::vector<double>& precision,
                                   std::vector<double>& recall) const {
  precision.clear();
  recall.clear();
  for (int64_t c = 0; c < num_classes_; ++c) {
    int64_t actual = 0;     // row sum: samples labeled c
    int64_t predicted = 0;  // column sum: samples predicted c
    for (int64_t o = 0; o < num_classes_; ++o) {
      actual += count(c, o);
      predicted += count(o, c);
    }
    if (actual == 0 && predicted == 0) continue;
    const auto tp = static_cast<double>(count(c, c));
    precision.push_back(predicted > 0 ? tp / static_cast<double>(predicted) : 0.0);
    recall.push_back(actual > 0 ? tp / static_cast<double>(actual) : 0.0);
  }
  return static_cast<int64_t>(precision.size());
}

namespace {
double mean_of(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double sum = 0.0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}
}  // namespace

double ConfusionMatrix::precision() const {
  std::vector<double> p, r;
  per_class(p, r);
  return mean_of(p);
}

double ConfusionMatrix::recall() const {
  std::vector<double> p, r;
  per_class(p, r);
  return mean_of(r);
}

double ConfusionMatrix::f1() const {
  std::vector<double> p, r;
  per_class(p, r);
  std::vector<double> f(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    f[i] = p[i] + r[i] > 0 ? 2 * p[i] * r[i] / (p[i] + r[i]) : 0;
  return mean_of(f);
}

double ConfusionMatrix::result() const {
  switch (score_) {
    case Score::Precision:
      return precision();
    case Score::Recall:
      return recall();
    case Score::F1:
      break;
  }
  return f1();
}

std::unique_ptr<Metric> make_metric(const std::string& name, const Loc& loc) {
  if (name == "accuracy" || name == "acc") return std::make_unique<Accuracy>();
  if (name == "precision")
    return std::make_unique<ConfusionMatrix>(0, ConfusionMatrix::Score::Precision);
  if (name == "recall") return std::make_unique<ConfusionMatrix>(0, ConfusionMatrix::Score::Recall);
  if (name == "f1") return std::make_unique<ConfusionMatrix>(0, ConfusionMatrix::Score::F1);
  const std::string prefix = "top", suffix = "_accuracy";
  if (name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) &&
      name.ends_with(suffix)) {
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        digits.size() < 10)
      return std::make_unique<TopKAccuracy>(std::stoll(digits), loc);
  }
  fail("make_metric", loc,
       "expected one of accuracy, acc, top<k>_accuracy, precision, recall, f1, but got \"{}\"",
       name);
}

}  // namespace kiln::train
