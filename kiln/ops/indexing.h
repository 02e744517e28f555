#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

// As torch.gather: out[i][j] = x[index[i][j]][j] for dim 0; index is int64 of x's rank.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const Loc& loc = Loc::current());
// Out-of-place torch.scatter_add: x with src added at index along dim.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                   const Loc& loc = Loc::current());
// Rows of x along dim picked by a 1-D int64 index.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index,
                    const Loc& loc = Loc::current());
// x with value where mask (bool, broadcast to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value,
                   const Loc& loc = Loc::current());
// int64 labels -> int64 one-hot with a trailing dim of num_classes (-1: max + 1).
Tensor one_hot(const Tensor& labels, int64_t num_classes = -1, const Loc& loc = Loc::current());

}  // namespace kiln
