#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/data/loader.h"
#include "kiln/nn/module.h"

namespace kiln::cli {

// A classifier's test-split results: mean cross-entropy, accuracy and the confusion matrix.
struct TestReport {
  double loss = 0.0;
  double accuracy = 0.0;
  int64_t samples = 0;
  std::vector<std::string> class_names;
  std::vector<int64_t> confusion;  // [label * C + predicted]

  nlohmann::json to_json() const;
  // Per-class precision / recall / F1 and the confusion matrix as aligned text.
  void print(std::ostream& out) const;
};

// Runs `model` in eval mode without gradients over every batch of `loader`.
TestReport evaluate_classifier(nn::Module& model, data::DataLoader& loader,
                               const std::vector<std::string>& class_names);

}  // namespace kiln::cli
