#pragma once
// The zoo models the saved-model tests save and load (mlp, cnn, resnet18, a transformer
// encoder), each with the shape of one example; tests/io/test_saved_model*.cpp share them.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/models.h"
#include "kiln/nn/transformer.h"

namespace kiln::io::testing {

struct ZooCase {
  std::string name;
  std::function<std::shared_ptr<nn::Module>()> make;
  Shape one;  // one example
  std::string precision = "float32";
};

inline std::vector<ZooCase> zoo_cases() {
  return {{"mlp", [] { return nn::mlp(1 * 12 * 12, {32}, 10); }, {1, 12, 12}},
          {"cnn", [] { return nn::small_cnn(1, 10, 28); }, {1, 28, 28}},
          {"resnet18", [] { return nn::resnet18(3, 10); }, {3, 16, 16}},
          {"transformer",
           [] {
             nn::TransformerEncoderLayerOptions o;
             o.dim_feedforward = 32;
             o.batch_first = true;
             return std::static_pointer_cast<nn::Module>(std::make_shared<nn::TransformerEncoder>(
                 [o] { return std::make_shared<nn::TransformerEncoderLayer>(16, 4, o); }, 2));
           },
           {7, 16}}};
}

}  // namespace kiln::io::testing
