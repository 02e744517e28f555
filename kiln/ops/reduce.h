#pragma once
#include <optional>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// Reductions over any set of dims (empty = all dims), with keepdim, as in PyTorch. Accumulation is
// in double for floating types (int64 for integers) in a fixed order, so results do not depend on
// the thread count. Integer/bool sums give int64 like torch.sum.
using Dims = std::vector<int64_t>;

Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false,
           const Loc& loc = Loc::current());
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false,
            const Loc& loc = Loc::current());
Tensor prod(const Tensor& x, const Dims& dims = {}, bool keepdim = false,
            const Loc& loc = Loc::current());
// Values only, like torch.amax/amin: the gradient is shared evenly among tied maxima.
Tensor max(const Tensor& x, const Dims& dims = {}, bool keepdim = false,
           const Loc& loc = Loc::current());
Tensor min(const Tensor& x, const Dims& dims = {}, bool keepdim = false,
           const Loc& loc = Loc::current());
// Index of the first maximum/minimum along dim (flattened when dim is empty); int64 result.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
              const Loc& loc = Loc::current());
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
              const Loc& loc = Loc::current());
// Divides by N - correction (correction 1 = Bessel's, the PyTorch default).
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false,
           const Loc& loc = Loc::current());
Tensor std(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false,
           const Loc& loc = Loc::current());
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false,
                 const Loc& loc = Loc::current());
// Vector p-norm over dims (p = 2 default; p = inf is max |x|).
Tensor norm(const Tensor& x, double p = 2.0, const Dims& dims = {}, bool keepdim = false,
            const Loc& loc = Loc::current());

// Sums a broadcast gradient back to `shape` (the inverse of broadcasting), used by vjps.
Tensor sum_to(const Tensor& x, const Shape& shape, const Loc& loc = Loc::current());

}  // namespace kiln
