#pragma once
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// As torch.nn.functional.pad. `pads` lists (before, after) pairs starting from the LAST dim, in
// PyTorch's order: {left, right} pads dim -1, {left, right, top, bottom} pads dims -1 and -2, and
// so on (at most x.dim() pairs). Output size of a padded dim = size + before + after.
//   "constant"   fills with `value`. Negative pads crop (as PyTorch): {-1, 2} drops the first
//                column and appends two. Any number of dims; sizes must stay >= 0.
//   "reflect"    mirrors around the edge without repeating it: [a b c d] with {2, 1} gives
//                [c b a b c d c]. Each pad must be in [0, size of its dim) (PyTorch's rule).
//   "replicate"  repeats the edge element: [a b c] with {2, 1} gives [a a a b c c]. Pads >= 0 and
//                the padded dims must be non-empty.
// reflect and replicate pad the last 1, 2 or 3 dims (PyTorch's ReflectionPad1d/2d/3d); kiln
// accepts any number of leading (batch, channel) dims, PyTorch requires one or two.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode = "constant",
           double value = 0.0, const Loc& loc = Loc::current());

// The gradient of pad: a tensor of input_shape where each element is the sum of the elements of
// grad (shaped like pad's output) that were copied from it; constant-filled positions contribute
// nothing. Sums run in a fixed order (deterministic).
Tensor pad_backward(const Tensor& grad, SizeList input_shape, const std::vector<int64_t>& pads,
                    const std::string& mode, const Loc& loc = Loc::current());

}  // namespace kiln
