#include "tools/report.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/loss.h"
#include "kiln/train/metrics.h"

namespace kiln::cli {
namespace {

struct ClassScores {
  double precision, recall, f1;
  int64_t support;
};

ClassScores scores(const TestReport& r, int64_t c) {
  const auto n = static_cast<int64_t>(r.class_names.size());
  int64_t tp = r.confusion[static_cast<size_t>(c * n + c)], predicted = 0, actual = 0;
  for (int64_t k = 0; k < n; ++k) {
    predicted += r.confusion[static_cast<size_t>(k * n + c)];
    actual += r.confusion[static_cast<size_t>(c * n + k)];
  }
  const double p = predicted ? static_cast<double>(tp) / predicted : 0.0;
  const double rc = actual ? static_cast<double>(tp) / actual : 0.0;
  return {p, rc, p + rc > 0 ? 2 * p * rc / (p + rc) : 0.0, actual};
}

}  // namespace

nlohmann::json TestReport::to_json() const {
  nlohmann::json per_class = nlohmann::json::array();
  for (int64_t c = 0; c < static_cast<int64_t>(class_names.size()); ++c) {
    const ClassScores s = scores(*this, c);
    per_class.push_back({{"class", class_names[static_cast<size_t>(c)]},
                         {"precision", s.precision},
                         {"recall", s.recall},
                         {"f1", s.f1},
                         {"support", s.support}});
  }
  return {{"loss", loss},           {"accuracy", accuracy},   {"samples", samples},
          {"per_class", per_class}, {"confusion", confusion}, {"class_names", class_names}};
}

void TestReport::print(std::ostream& out) const {
  const auto n = static_cast<int64_t>(class_names.size());
  size_t width = 5;
  for (const auto& name : class_names) width = std::max(width, name.size());
  out << fmt::format("{:>{}}  precision  recall     f1  support\n", "class", width);
  for (int64_t c = 0; c < n; ++c) {
    const ClassScores s = scores(*this, c);
    out << fmt::format("{:>{}}  {:9.4f}  {:6.4f}  {:.4f}  {:7}\n",
                       class_names[static_cast<size_t>(c)], width, s.precision, s.recall, s.f1,
                       s.support);
  }
  out << "confusion matrix (rows: true class, columns: predicted)\n";
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < n; ++c)
      out << fmt::format("{:6}", confusion[static_cast<size_t>(r * n + c)]);
    out << '\n';
  }
}

TestReport evaluate_classifier(nn::Module& model, data::DataLoader& loader,
                               const std::vector<std::string>& class_names) {
  const bool was_training = model.is_training();
  model.train(false);
  NoGradGuard no_grad;
  train::Mean loss;
  train::Accuracy accuracy;
  train::ConfusionMatrix confusion(static_cast<int64_t>(class_names.size()));
  int64_t samples = 0;
  for (const data::Example& batch : loader) {
    const Tensor logits = model(batch.data);
    const auto n = batch.data.size(0);
    loss.update(cross_entropy(logits, batch.target).item(), static_cast<double>(n));
    accuracy.update(logits, batch.target);
    confusion.update(logits, batch.target);
    samples += n;
  }
  model.train(was_training);
  TestReport r;
  r.loss = loss.result();
  r.accuracy = accuracy.result();
  r.samples = samples;
  r.class_names = class_names;
  r.confusion = confusion.counts();
  return r;
}

}  // namespace kiln::cli
