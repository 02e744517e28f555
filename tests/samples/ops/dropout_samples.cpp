// Registry samples of the ops defined in kiln/ops/dropout.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/dropout.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<Tensor> one(Tensor t) {
  return {std::move(t)};
}

KILN_REGISTER_OP_SAMPLES("dropout", [] {
  return std::vector<OpSample>{
      {"p0",
       {sample_tensor({3, 4}, 401)},
       [](const std::vector<Tensor>& in) { return one(dropout(in[0], 0.0, true)); },
       "F.dropout(a0, p=0.0)"},
      {"eval",
       {sample_tensor({2, 3}, 402)},
       [](const std::vector<Tensor>& in) { return one(dropout(in[0], 0.5, false)); },
       "F.dropout(a0, p=0.5, training=False)"},
      {"p1",
       {sample_tensor({2, 3}, 403)},
       [](const std::vector<Tensor>& in) { return one(dropout(in[0], 1.0, true)); },
       "F.dropout(a0, p=1.0)"},
      // PyTorch cannot reproduce kiln's mask: gradcheck only. The generator is created inside
      // fn with a fixed seed, so every call of gradcheck sees the same mask.
      {"fixed_mask_gradcheck",
       {sample_tensor({4, 3}, 404).t()},
       [](const std::vector<Tensor>& in) {
         Generator gen(1234);
         return one(dropout(in[0], 0.4, true, &gen));
       }},
  };
});

}  // namespace

}  // namespace kiln
