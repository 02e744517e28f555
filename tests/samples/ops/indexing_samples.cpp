// Registry samples of the ops defined in kiln/ops/indexing.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<Tensor> one(Tensor t) {
  return {std::move(t)};
}

Tensor long_tensor(std::vector<int64_t> values, Shape shape) {
  return tensor<int64_t>(values, shape);
}

Tensor bool_tensor(const std::vector<int>& values, Shape shape) {
  Tensor t = empty(std::move(shape), {DType::Bool});
  bool* p = t.data<bool>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i] != 0;
  return t;
}

KILN_REGISTER_OP_SAMPLES("gather", [] {
  return std::vector<OpSample>{
      {"gather/dim1",
       {sample_tensor({3, 4}, 71), long_tensor({0, 3, 3, 1, 2, 0}, {3, 2})},
       [](const std::vector<Tensor>& x) { return one(gather(x[0], 1, x[1])); },
       "torch.gather(a0, 1, a1)",
       {0}},
      {"gather/dim0_neg_smaller_index",
       {sample_tensor({3, 4}, 72), long_tensor({2, 0, 1, 2, 2, 1}, {2, 3})},
       [](const std::vector<Tensor>& x) { return one(gather(x[0], -2, x[1])); },
       "torch.gather(a0, -2, a1)",
       {0}},
  };
});

KILN_REGISTER_OP_SAMPLES("scatter_add", [] {
  return std::vector<OpSample>{
      {"scatter_add/dim0_duplicates",
       {sample_tensor({3, 4}, 81), long_tensor({0, 1, 2, 0, 2, 2, 0, 1}, {2, 4}),
        sample_tensor({2, 4}, 82)},
       [](const std::vector<Tensor>& x) { return one(scatter_add(x[0], 0, x[1], x[2])); },
       "torch.scatter_add(a0, 0, a1, a2)",
       {0, 2}},
      {"scatter_add/neg_dim",
       {sample_tensor({2, 5}, 83), long_tensor({4, 4, 0, 1, 3, 1}, {2, 3}),
        sample_tensor({2, 3}, 84)},
       [](const std::vector<Tensor>& x) { return one(scatter_add(x[0], -1, x[1], x[2])); },
       "torch.scatter_add(a0, -1, a1, a2)",
       {0, 2}},
  };
});

KILN_REGISTER_OP_SAMPLES("index_select", [] {
  return std::vector<OpSample>{
      {"index_select/dim0_duplicates",
       {sample_tensor({4, 3}, 91), long_tensor({3, 0, 3}, {3})},
       [](const std::vector<Tensor>& x) { return one(index_select(x[0], 0, x[1])); },
       "torch.index_select(a0, 0, a1)",
       {0}},
      {"index_select/middle_dim",
       {sample_tensor({2, 4, 3}, 92), long_tensor({1, 2, 1, 0, 3}, {5})},
       [](const std::vector<Tensor>& x) { return one(index_select(x[0], 1, x[1])); },
       "torch.index_select(a0, 1, a1)",
       {0}},
  };
});

KILN_REGISTER_OP_SAMPLES("masked_fill", [] {
  return std::vector<OpSample>{
      {"masked_fill/same_shape",
       {sample_tensor({2, 3}, 101), bool_tensor({1, 0, 0, 1, 1, 0}, {2, 3})},
       [](const std::vector<Tensor>& x) { return one(masked_fill(x[0], x[1], -2.0)); },
       "torch.masked_fill(a0, a1, -2.0)",
       {0}},
      {"masked_fill/broadcast_mask",
       {sample_tensor({2, 3, 4}, 102), bool_tensor({0, 1, 1, 0}, {4})},
       [](const std::vector<Tensor>& x) { return one(masked_fill(x[0], x[1], 0.5)); },
       "torch.masked_fill(a0, a1, 0.5)",
       {0}},
      {"masked_fill/broadcast_both",
       {sample_tensor({3, 1}, 103), bool_tensor({1, 0, 1, 0}, {1, 4})},
       [](const std::vector<Tensor>& x) { return one(masked_fill(x[0], x[1], 3.0)); },
       "torch.masked_fill(a0, a1, 3.0)",
       {0}},
  };
});

KILN_REGISTER_OP_SAMPLES("one_hot", [] {
  OpSample s{"one_hot/basic",
             {long_tensor({0, 2, 4, 1, 1, 3}, {2, 3})},
             [](const std::vector<Tensor>& x) { return one(one_hot(x[0], 5)); },
             "torch.nn.functional.one_hot(a0, 5)"};
  s.check_grad = false;
  OpSample v{"one_hot/vector",
             {long_tensor({2, 0, 1}, {3})},
             [](const std::vector<Tensor>& x) { return one(one_hot(x[0], 3)); },
             "torch.nn.functional.one_hot(a0, 3)"};
  v.check_grad = false;
  return std::vector<OpSample>{s, v};
});

}  // namespace

}  // namespace kiln
