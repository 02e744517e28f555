// Registry samples of the ops defined in kiln/optim/sgd.cpp (Note [op registry]).
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/sgd.h"
#include "tests/samples/optim/update_sample.h"
#include "tests/samples/registry.h"

namespace kiln::optim {

namespace {

KILN_REGISTER_OP_SAMPLES("sgd_update", [] {
  auto sgd = [](SGDOptions o) {
    return [o](std::vector<Tensor> p) -> std::unique_ptr<Optimizer> {
      return std::make_unique<SGD>(std::move(p), o);
    };
  };
  return std::vector<OpSample>{
      detail::update_sample("plain", sgd({.lr = 0.1})),
      detail::update_sample(
          "nesterov_weight_decay",
          sgd({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true})),
  };
});

}  // namespace

}  // namespace kiln::optim
