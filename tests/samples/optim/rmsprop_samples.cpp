// Registry samples of the ops defined in kiln/optim/rmsprop.cpp (Note [op registry]).
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/rmsprop.h"
#include "tests/samples/optim/update_sample.h"
#include "tests/samples/registry.h"

namespace kiln::optim {

namespace {

KILN_REGISTER_OP_SAMPLES("rmsprop_update", [] {
  auto rms = [](RMSpropOptions o) {
    return [o](std::vector<Tensor> p) -> std::unique_ptr<Optimizer> {
      return std::make_unique<RMSprop>(std::move(p), o);
    };
  };
  return std::vector<OpSample>{
      detail::update_sample("plain", rms({})),
      detail::update_sample("centered_momentum", rms({.momentum = 0.9, .centered = true})),
  };
});

}  // namespace

}  // namespace kiln::optim
