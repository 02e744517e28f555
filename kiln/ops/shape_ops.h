#pragma once
#include <optional>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// Views share storage with their input (no copy); reshape copies only when no view is possible.
// One size in `shape` may be -1 (inferred).
Tensor reshape(const Tensor& x, SizeList shape, const Loc& loc = Loc::current());
// Like reshape but never copies: errors when the strides do not allow a view.
Tensor view(const Tensor& x, SizeList shape, const Loc& loc = Loc::current());
Tensor permute(const Tensor& x, std::vector<int64_t> dims, const Loc& loc = Loc::current());
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1, const Loc& loc = Loc::current());
Tensor narrow(const Tensor& x, int64_t dim, SymInt start, SymInt length,
              const Loc& loc = Loc::current());
// x[start:end:step] along dim; start/end are clamped like Python slices, step > 0.
// start and end may be symbolic (x.dim_size(0) - 1): Note [size lists].
Tensor slice(const Tensor& x, int64_t dim, std::optional<SymInt> start, std::optional<SymInt> end,
             int64_t step = 1, const Loc& loc = Loc::current());
// The gradient of slice(): zeros of input_shape with grad written at [start:end:step] along dim.
Tensor slice_backward(const Tensor& grad, SizeList input_shape, int64_t dim, SymInt start,
                      SymInt end, int64_t step = 1, const Loc& loc = Loc::current());
Tensor select(const Tensor& x, int64_t dim, int64_t index, const Loc& loc = Loc::current());
// -1 keeps a size; new leading dims may be added.
Tensor expand(const Tensor& x, SizeList shape, const Loc& loc = Loc::current());
Tensor broadcast_to(const Tensor& x, SizeList shape, const Loc& loc = Loc::current());
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt,
               const Loc& loc = Loc::current());
Tensor unsqueeze(const Tensor& x, int64_t dim, const Loc& loc = Loc::current());
Tensor flatten(const Tensor& x, int64_t start = 0, int64_t end = -1,
               const Loc& loc = Loc::current());
// Splits dim `dim` into `sizes` (one of them may be -1), as torch.unflatten: the other dims keep
// whatever size they have, so a trace holds no batch size (Note [size-free shape attrs]).
Tensor unflatten(const Tensor& x, int64_t dim, SizeList sizes, const Loc& loc = Loc::current());
// Copies into a fresh contiguous tensor (differentiable).
Tensor clone(const Tensor& x, const Loc& loc = Loc::current());
// Returns x itself when already contiguous, else clone(x).
Tensor contiguous(const Tensor& x, const Loc& loc = Loc::current());
// x laid out as `format` (Note [channels-last]): x itself (or a view of it) when it already is,
// else a differentiable copy. kChannelsLast needs rank 4 [N, C, H, W].
Tensor contiguous(const Tensor& x, MemoryFormat format, const Loc& loc = Loc::current());
// Converts the dtype (differentiable between floating types); returns x when already dtype.
Tensor to_dtype(const Tensor& x, DType dtype, const Loc& loc = Loc::current());
// Shares storage, cuts history (an op: Note [detach]).
Tensor detach(const Tensor& x, const Loc& loc = Loc::current());

namespace detail {
// Note [views of temporaries]: a view of a tensor that a function made and did not return (the
// copy a non-viewable reshape makes, matmul's bmm output) is, for the user, a new tensor, as in
// PyTorch: in-place ops on it are allowed. Clears t's view mark and returns t.
Tensor release_view(Tensor t);
}  // namespace detail

}  // namespace kiln
