#pragma once
// Small synthetic datasets shared by the training-loop suites.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/ops/factories.h"

namespace kiln::test {

// Two classes in 2-D split by x + y = 0, each pushed 0.3 away from the line: float32 [n, 2]
// points and int64 labels, reproducible from `seed`.
inline std::shared_ptr<data::TensorDataset> separable(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t i = 0; i < n; ++i) {
    float x = uniform(gen), y = uniform(gen);
    const int64_t label = x + y > 0 ? 1 : 0;
    const float push = label == 1 ? 0.3f : -0.3f;
    xs.push_back(x + push);
    xs.push_back(y + push);
    ys.push_back(label);
  }
  return std::make_shared<data::TensorDataset>(kiln::tensor<float>(xs, Shape{n, 2}),
                                               kiln::tensor<int64_t>(ys));
}

}  // namespace kiln::test
