// Registry samples of the ops defined in kiln/ops/embedding.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/embedding.h"
#include "kiln/ops/factories.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<Tensor> one(Tensor t) {
  return {std::move(t)};
}

Tensor long_tensor(std::vector<int64_t> values, Shape shape) {
  return tensor<int64_t>(values, shape);
}

// With a padding_idx in the indices the forward reads the padding row while its gradient is
// zero by definition, which finite differences cannot confirm: those samples compare forward
// values only. The zeroed rows are compared with PyTorch through embedding_backward's samples.
KILN_REGISTER_OP_SAMPLES("embedding", [] {
  return std::vector<OpSample>{
      {"2d_indices_duplicates",
       {sample_tensor({5, 3}, 501), long_tensor({0, 4, 2, 4, 4, 1}, {2, 3})},
       [](const std::vector<Tensor>& in) { return one(embedding(in[0], in[1])); },
       "F.embedding(a1, a0)",
       {0}},
      {"padding_idx",
       {sample_tensor({4, 2}, 502), long_tensor({1, 3, 1, 0, 2}, {5})},
       [](const std::vector<Tensor>& in) { return one(embedding(in[0], in[1], 1)); },
       "F.embedding(a1, a0, padding_idx=1)",
       {0},
       false},
      {"negative_padding_strided_weight",
       {sample_tensor({3, 4}, 503).t(), long_tensor({3, 0, 3, 2}, {2, 2})},
       [](const std::vector<Tensor>& in) { return one(embedding(in[0], in[1], -1)); },
       "F.embedding(a1, a0, padding_idx=-1)",
       {0},
       false},
      {"zero_dim_index",
       {sample_tensor({4, 3}, 504), long_tensor({2}, {})},
       [](const std::vector<Tensor>& in) { return one(embedding(in[0], in[1])); },
       "F.embedding(a1, a0)",
       {0}},
  };
});

KILN_REGISTER_OP_SAMPLES("embedding_backward", [] {
  return std::vector<OpSample>{
      {"duplicates",
       {sample_tensor({2, 3, 4}, 511), long_tensor({0, 4, 2, 4, 4, 1}, {2, 3})},
       [](const std::vector<Tensor>& in) { return one(embedding_backward(in[0], in[1], 5)); },
       "torch.ops.aten.embedding_backward(a0, a1, 5, -1, False, False)",
       {0}},
      {"padding_idx",
       {sample_tensor({5, 2}, 512), long_tensor({1, 3, 1, 0, 2}, {5})},
       [](const std::vector<Tensor>& in) { return one(embedding_backward(in[0], in[1], 4, 1)); },
       "torch.ops.aten.embedding_backward(a0, a1, 4, 1, False, False)",
       {0}},
  };
});

}  // namespace

}  // namespace kiln
