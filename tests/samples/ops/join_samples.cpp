// Registry samples of the ops defined in kiln/ops/join.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/join.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<Tensor> one(Tensor t) {
  return {std::move(t)};
}

KILN_REGISTER_OP_SAMPLES("cat", [] {
  return std::vector<OpSample>{
      {"cat/three_neg_dim",
       {sample_tensor({2, 3}, 31), sample_tensor({2, 1}, 32), sample_tensor({2, 4}, 33)},
       [](const std::vector<Tensor>& x) {
         return one(cat({x[0], x[1], x[2]}, -1));
       },
       "torch.cat([a0, a1, a2], dim=-1)"},
      {"cat/dim0",
       {sample_tensor({1, 3, 2}, 34), sample_tensor({2, 3, 2}, 35)},
       [](const std::vector<Tensor>& x) {
         return one(cat({x[0], x[1]}, 0));
       },
       "torch.cat([a0, a1], dim=0)"},
      {"cat/transposed_input",
       {sample_tensor({3, 2}, 36), sample_tensor({2, 2}, 37)},
       [](const std::vector<Tensor>& x) {
         return one(cat({transpose(x[0], 0, 1), x[1]}, 1));
       },
       "torch.cat([a0.transpose(0, 1), a1], dim=1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("stack", [] {
  return std::vector<OpSample>{
      {"stack/dim1",
       {sample_tensor({2, 3}, 41), sample_tensor({2, 3}, 42)},
       [](const std::vector<Tensor>& x) {
         return one(stack({x[0], x[1]}, 1));
       },
       "torch.stack([a0, a1], dim=1)"},
      {"stack/neg_dim",
       {sample_tensor({3}, 43), sample_tensor({3}, 44), sample_tensor({3}, 45)},
       [](const std::vector<Tensor>& x) {
         return one(stack({x[0], x[1], x[2]}, -1));
       },
       "torch.stack([a0, a1, a2], dim=-1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("split", [] {
  return std::vector<OpSample>{
      {"split/size",
       {sample_tensor({2, 5}, 51)},
       [](const std::vector<Tensor>& x) { return split(x[0], 2, 1); },
       "torch.split(a0, 2, dim=1)"},
      {"split/sizes_neg_dim",
       {sample_tensor({3, 4}, 52)},
       [](const std::vector<Tensor>& x) {
         return split(x[0], std::vector<int64_t>{1, 3}, -1);
       },
       "torch.split(a0, [1, 3], dim=-1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("chunk", [] {
  return std::vector<OpSample>{
      {"chunk/uneven",
       {sample_tensor({5, 2}, 61)},
       [](const std::vector<Tensor>& x) { return chunk(x[0], 3, 0); },
       "torch.chunk(a0, 3, dim=0)"},
      {"chunk/fewer_pieces",
       {sample_tensor({2, 6}, 62)},
       [](const std::vector<Tensor>& x) { return chunk(x[0], 4, -1); },
       "torch.chunk(a0, 4, dim=-1)"},
  };
});

}  // namespace

}  // namespace kiln
