#pragma once
// The join family's shared pieces: what cat's definition (join.cpp) and its CPU kernel
// (kiln/backend/cpu/join_ops.cpp, Note [kernel table]) both need — which inputs cat skips, and its
// attributes.
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

// PyTorch still accepts 1-D empty tensors of any other rank in cat and skips them (legacy
// behavior that code relying on "start from torch.tensor([])" needs).
inline bool skipped_in_cat(const Tensor& t) {
  return t.dim() == 1 && t.dim_size(0) == 0;
}

// cat: the dim (not yet wrapped).
struct CatAttrs {
  int64_t dim = 0;
};
const CatAttrs& cat_attrs(const Op& op);

}  // namespace detail
}  // namespace kiln
