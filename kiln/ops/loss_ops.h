#pragma once
// The classification losses' shared pieces: what the cross_entropy op's definition
// (loss_classification.cpp) and its CPU kernel (kiln/backend/cpu/loss_ops.cpp, Note [kernel
// table]) both need — the op's attributes, where the classes are, and the check of class indices.
#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/op.h"

namespace kiln::detail {

// Where the classes are: dim 1 of [N, C, d1, ...], dim 0 of an unbatched [C].
struct ClassLayout {
  int64_t class_dim = 1;
  int64_t classes = 0;
  bool probs = false;  // target holds probabilities of input's shape (else int64 indices)
  Shape loss_shape;    // per-position loss shape: input's without the class dim
};

// The attributes of cross_entropy.
struct CrossEntropyAttrs {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
};
const CrossEntropyAttrs& cross_entropy_attrs(const Op& op);

// The layout of cross_entropy's input and target (already checked by the op's inference).
ClassLayout cross_entropy_layout(const Op& op, const Tensor& x, const Tensor& target);

// Note [index checks] (indexing.cpp): class indices are checked in one serial pass before any
// parallel work, so a bad value is an Error naming it.
void check_target_values(const char* op, const Tensor& target, int64_t classes,
                         int64_t ignore_index, const Tensor& x, const Loc& loc);

}  // namespace kiln::detail
