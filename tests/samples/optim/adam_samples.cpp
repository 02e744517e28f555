// Registry samples of the ops defined in kiln/optim/adam.cpp (Note [op registry]).
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/adam.h"
#include "tests/samples/optim/update_sample.h"
#include "tests/samples/registry.h"

namespace kiln::optim {

namespace {

KILN_REGISTER_OP_SAMPLES("adam_update", [] {
  using detail::update_sample;
  auto adam = [](AdamOptions o) {
    return [o](std::vector<Tensor> p) -> std::unique_ptr<Optimizer> {
      return std::make_unique<Adam>(std::move(p), o);
    };
  };
  return std::vector<OpSample>{
      update_sample("default", adam({})),
      update_sample("amsgrad_weight_decay",
                    adam({.lr = 0.01, .weight_decay = 0.1, .amsgrad = true})),
      update_sample("adamw",
                    [](std::vector<Tensor> p) -> std::unique_ptr<Optimizer> {
                      return std::make_unique<AdamW>(std::move(p), AdamWOptions{});
                    }),
  };
});

}  // namespace

}  // namespace kiln::optim
