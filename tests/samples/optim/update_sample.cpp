#include "tests/samples/optim/update_sample.h"

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"

namespace kiln::optim::detail {

OpSample update_sample(std::string label,
                       std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)> make) {
  auto fn = [make](const std::vector<Tensor>& in) {
    NoGradGuard no_grad;
    Tensor p = in[0].detach().clone();
    p.set_requires_grad(true);
    std::unique_ptr<Optimizer> opt = make({p});
    for (int step = 1; step <= 3; ++step) {
      p.set_grad(kiln::mul(in[1], static_cast<double>(step)));
      opt->step();
    }
    return std::vector<Tensor>{p.detach()};
  };
  OpSample s{std::move(label),
             {sample_tensor({3, 4}, 951), sample_tensor({3, 4}, 952)},
             fn,
             "",
             {},
             false};
  s.runs_on_meta = false;
  return s;
}

}  // namespace kiln::optim::detail
