// Registry samples of the ops defined in kiln/optim/adagrad.cpp (Note [op registry]).
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/adagrad.h"
#include "tests/samples/optim/update_sample.h"
#include "tests/samples/registry.h"

namespace kiln::optim {

namespace {

KILN_REGISTER_OP_SAMPLES("adagrad_update", [] {
  return std::vector<OpSample>{
      detail::update_sample("lr_decay", [](std::vector<Tensor> p) -> std::unique_ptr<Optimizer> {
        return std::make_unique<Adagrad>(std::move(p), AdagradOptions{.lr_decay = 0.1});
      })};
});

}  // namespace

}  // namespace kiln::optim
