// Reduction dims (reduce_ops.h): wrapping, validation and the output shapes.
#include "kiln/ops/reduce_ops.h"

#include <functional>
#include <string>

#include "kiln/ops/shape_ops.h"

namespace kiln {
namespace detail {

namespace {

ReduceDims normalize(std::string_view op, const Shape& shape, const Dims& dims, bool keepdim,
                     const Loc& loc, const std::function<std::string()>& describe) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  ReduceDims rd;
  rd.reduced.assign(shape.size(), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, rank, op, loc);
    if (rank == 0) continue;  // a zero-dim tensor reduces over "dim 0", which it does not have
    if (rd.reduced[w])
      fail(op, loc, "expected distinct dims, but got dim {} twice in {} for {}", w, shape_str(dims),
           describe());
    rd.reduced[w] = true;
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (rd.reduced[d]) {
      rd.dims.push_back(d);
      rd.count *= shape[d];
      rd.keep_shape.push_back(1);
      if (keepdim) rd.out_shape.push_back(1);
    } else {
      rd.keep_shape.push_back(shape[d]);
      rd.out_shape.push_back(shape[d]);
    }
  }
  return rd;
}

}  // namespace

ReduceDims normalize_reduce_dims(std::string_view op, const Tensor& x, const Dims& dims,
                                 bool keepdim, const Loc& loc) {
  return normalize(op, x.shape(), dims, keepdim, loc, [&] { return x.describe(); });
}

// A reshape to keep_shape would write the kept sizes into a traced backward; with every dim
// reduced keep_shape is all ones (size-free), otherwise each reduced dim is put back by an
// unsqueeze (Note [size-free backward]).
Tensor unsqueeze_reduced(const Tensor& g, const ReduceDims& rd) {
  if (g.shape() == rd.keep_shape) return g;
  if (rd.dims.size() == rd.keep_shape.size()) return reshape(g, rd.keep_shape);
  Tensor out = g;
  for (int64_t d : rd.dims) out = unsqueeze(out, d);
  return out;
}

ReduceDims normalize_reduce_dims(const Shape& shape, const Dims& dims, bool keepdim) {
  return normalize("reduce", shape, dims, keepdim, Loc::current(), [] { return std::string(); });
}

ReduceDims arg_reduce_dims(std::string_view op, const ArgReduceAttrs& a, const Tensor& x,
                           const Loc& loc) {
  return normalize_reduce_dims(op, x, a.dim ? Dims{*a.dim} : Dims{}, a.keepdim, loc);
}

}  // namespace detail
}  // namespace kiln
