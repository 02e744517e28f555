#pragma once
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0, const Loc& loc = Loc::current());
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0, const Loc& loc = Loc::current());
// Pieces of `split_size` along dim (the last may be smaller); views of x.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0,
                          const Loc& loc = Loc::current());
// Pieces with the given sizes, which must add up to x.dim_size(dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0,
                          const Loc& loc = Loc::current());
// `chunks` pieces of ceil(size / chunks), as torch.chunk (may return fewer).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0,
                          const Loc& loc = Loc::current());

}  // namespace kiln
