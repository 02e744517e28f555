#pragma once
// The embedding family's shared pieces: what its ops' definitions (embedding.cpp) and their CPU
// kernels (kiln/backend/cpu/embedding_ops.cpp, Note [kernel table]) both need — the check of the
// index values that only a kernel can run, and embedding_backward's attributes (embedding's kernel
// reads none).
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

// The values of int64 `indices`, each checked to be in [0, num_rows) (`rows_of` names the table
// in the error). Run serially before any parallel work (Note [index checks] in indexing.cpp),
// with the caller's line (kernel_call_site()).
std::vector<int64_t> checked_embedding_indices(const char* op, const Tensor& indices,
                                               int64_t num_rows, const std::string& rows_of,
                                               const Loc& loc);

// embedding_backward: V (the rows of the gradient) and the wrapped padding row, skipped.
struct EmbeddingBackwardAttrs {
  int64_t num_weights = 0;
  std::optional<int64_t> padding_idx;
};
const EmbeddingBackwardAttrs& embedding_backward_attrs(const Op& op);

}  // namespace detail
}  // namespace kiln
