#pragma once
// The norm family's shared pieces: what its ops' definitions (norm.cpp, norm_backward.cpp,
// channel_affine.cpp) and their CPU kernels (kiln/backend/cpu/norm_ops.cpp, Note [kernel table])
// both need — the geometry and each op's attributes.
#include "kiln/ops/op.h"
#include "kiln/ops/reduce.h"

namespace kiln::detail {

enum class NormKind { kBatch, kLayer, kGroup };
const char* norm_kind_name(NormKind k);  // "batch_norm", "layer_norm", "group_norm"

// Note [norm geometry]: every norm sees contiguous x as [P, Q, R] with parameters (weight, bias)
// indexed by q:
//   batch_norm  [N, C, spatial]: one statistic per q, over p and r.
//   group_norm  [N, C, spatial]: one statistic per (p, group), over the group's contiguous
//               chunk of Q / G channels times R.
//   layer_norm  [M, K, 1], G = 1: one statistic per p, over its row of K.
// For the vjp the same data is viewed with the statistics as reduced dims: `view` is x's view,
// `reduce` the dims the statistics reduce, `stat_view` the keepdim shape of the statistics and
// `param_view` the parameters' view, broadcastable against `view`.
struct NormGeom {
  int64_t p = 1, q = 1, r = 1, groups = 1;
  Shape stat_shape;  // shape of the mean / var outputs
  Shape view, stat_view, param_view;
  Dims reduce;
  int64_t count = 1;  // elements per statistic
};

NormGeom make_norm_geom(NormKind kind, const Shape& x, int64_t groups_or_k);

// batch_norm and its gradient keep x's layout when x is a channels-last float32 [N, C, H, W]
// (the CPU kernels read it as rows of C channels); every other input gives contiguous outputs.
bool batch_norm_keeps_channels_last(const Tensor& x);

// The attributes of batch_norm / layer_norm / group_norm (NormOp in norm.cpp).
struct NormAttrs {
  NormKind kind = NormKind::kBatch;
  int64_t groups_or_k = 0;  // num_groups (group_norm) or the rank of normalized_shape (layer_norm)
  double eps = 1e-5;
  bool has_weight = false, has_bias = false;
};
const NormAttrs& norm_attrs(const Op& op);

// The attributes of batch_norm_backward (norm_backward.cpp).
struct BatchNormBackwardAttrs {
  double eps = 1e-5;
  bool has_weight = false, has_stat_grads = false;
};
const BatchNormBackwardAttrs& batch_norm_backward_attrs(const Op& op);

// The attributes of running_stat_update (running_stats.cpp, Note [running statistics]).
struct RunningStatAttrs {
  double momentum = 0.1;
  bool unbiased = false;  // the variance: scale the batch's biased variance by n / (n - 1)
};
const RunningStatAttrs& running_stat_attrs(const Op& op);

// Dispatches running_stat_update: running <- (1 - momentum) * running + momentum * batch_stat
// (times n / (n - 1) when unbiased, n = x's elements per channel), in place.
void running_stat_update(const Tensor& running, const Tensor& batch_stat, const Tensor& x,
                         double momentum, bool unbiased, const Loc& loc = Loc::current());

}  // namespace kiln::detail
