#include "kiln/ops/norm_ops.h"

namespace kiln::detail {

const char* norm_kind_name(NormKind k) {
  switch (k) {
    case NormKind::kBatch:
      return "batch_norm";
    case NormKind::kLayer:
      return "layer_norm";
    case NormKind::kGroup:
      return "group_norm";
  }
  return "norm";
}

NormGeom make_norm_geom(NormKind kind, const Shape& x, int64_t groups_or_k) {
  NormGeom g;
  const int64_t numel = shape_numel(x);
  if (kind == NormKind::kLayer) {
    const int64_t lead = static_cast<int64_t>(x.size()) - groups_or_k;
    g.stat_shape.assign(x.begin(), x.begin() + lead);
    g.p = shape_numel(g.stat_shape);
    g.q = shape_numel(Shape(x.begin() + lead, x.end()));
    g.view = {g.p, g.q};
    g.stat_view = {g.p, 1};
    g.param_view = {1, g.q};
    g.reduce = {1};
    g.count = g.q;
    return g;
  }
  g.p = x[0];
  g.q = x[1];
  g.r = g.p * g.q == 0 ? 0 : numel / (g.p * g.q);
  if (kind == NormKind::kBatch) {
    g.stat_shape = {g.q};
    g.view = {g.p, g.q, g.r};
    g.stat_view = {1, g.q, 1};
    g.param_view = {1, g.q, 1};
    g.reduce = {0, 2};
    g.count = g.p * g.r;
  } else {
    g.groups = groups_or_k;
    const int64_t cg = g.q / g.groups;
    g.stat_shape = {g.p, g.groups};
    g.view = {g.p, g.groups, cg, g.r};
    g.stat_view = {g.p, g.groups, 1, 1};
    g.param_view = {1, g.groups, cg, 1};
    g.reduce = {2, 3};
    g.count = cg * g.r;
  }
  return g;
}

}  // namespace kiln::detail
