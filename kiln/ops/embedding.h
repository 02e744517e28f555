#pragma once
#include <optional>

#include "kiln/core/tensor.h"

namespace kiln {

// As torch.nn.functional.embedding(indices, weight, padding_idx) (note kiln's argument order:
// weight first, like the other ops that index a tensor). weight is [V, D] (any dtype), indices
// int64 of any shape (zero-dim too); the result has shape indices.shape + [D] and holds
// weight[indices[...]]. Every index must be in [0, V): an index outside is an error naming it and
// V. padding_idx (in [-V, V), negative counts from V) marks a row whose gradient stays zero, as
// in PyTorch; its forward value is still weight[padding_idx].
// The gradient w.r.t. weight is embedding_backward (duplicate indices add up).
Tensor embedding(const Tensor& weight, const Tensor& indices,
                 std::optional<int64_t> padding_idx = std::nullopt,
                 const Loc& loc = Loc::current());

// The gradient of embedding: zeros [num_weights, D] with every row grad[i] (grad has shape
// indices.shape + [D]) added into row indices[i], in index order, skipping padding_idx.
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, SymInt num_weights,
                          std::optional<int64_t> padding_idx = std::nullopt,
                          const Loc& loc = Loc::current());

}  // namespace kiln
