#pragma once
// The indexing family's shared pieces: what its ops' definitions (indexing.cpp) and their CPU
// kernels (kiln/backend/cpu/indexing_ops.cpp, Note [kernel table]) both need — the checks of index
// values that only a kernel can run, and each op's attributes.
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {
namespace detail {

// Note [index checks] (indexing.cpp): every value of `index` must be in [0, bound), the size of
// dim `dim` of x; a value outside is an Error naming it. Run serially before any parallel work,
// with the caller's line (kernel_call_site()).
void check_index_values(const char* op, const Tensor& index, int64_t bound, const Tensor& x,
                        int64_t dim, const Loc& loc);
// one_hot: every label in [0, num_classes); the labels' values, in order.
std::vector<int64_t> checked_one_hot_labels(const char* op, const Tensor& labels,
                                            int64_t num_classes, const Loc& loc);

// gather, scatter_add and index_select: the dim (not yet wrapped).
struct IndexDimAttrs {
  int64_t dim = 0;
};
const IndexDimAttrs& index_dim_attrs(const Op& op);

// masked_fill: the value written where the mask is true.
struct MaskedFillAttrs {
  double value = 0.0;
};
const MaskedFillAttrs& masked_fill_attrs(const Op& op);

// one_hot: the number of classes (>= 0; the functional API resolved -1).
struct OneHotAttrs {
  int64_t num_classes = 0;
};
const OneHotAttrs& one_hot_attrs(const Op& op);

}  // namespace detail
}  // namespace kiln
