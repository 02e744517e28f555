// Joining and splitting: cat (an op; its kernel is in kiln/backend/cpu/join_ops.cpp, Note [kernel
// table]) and stack, split and chunk, which compose cat, unsqueeze and narrow.
#include "kiln/ops/join.h"

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/join_ops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/type_promotion.h"

namespace kiln {

namespace {

using detail::skipped_in_cat;

// The tensor whose shape the others must match: the first one cat does not skip.
size_t reference_index(const std::vector<Tensor>& in) {
  for (size_t i = 0; i < in.size(); ++i)
    if (!skipped_in_cat(in[i])) return i;
  return 0;
}

class CatOp final : public Op {
 public:
  explicit CatOp(int64_t dim) : a_{dim} {}
  const char* name() const override { return "cat"; }
  nlohmann::json attrs() const override { return {{"dim", a_.dim}}; }
  const detail::CatAttrs& cat_attrs() const { return a_; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    if (in.empty()) fail(name(), loc, "expected a non-empty list of tensors, but got an empty one");
    const size_t ref = reference_index(in);
    const Tensor& r = in[ref];
    if (r.dim() == 0)
      fail(name(), loc,
           "expected tensors with at least one dimension, but got tensor {} {} (zero-dimensional "
           "tensors cannot be concatenated)",
           ref, r.describe());
    const int64_t d = wrap_dim(a_.dim, r.dim(), name(), loc);
    Shape shape = r.shape();
    shape[d] = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const Tensor& t = in[i];
      if (skipped_in_cat(t)) continue;
      if (t.dim() != r.dim())
        fail(name(), loc,
             "expected tensor {} to have the same rank as tensor {} ({}), but got {} (tensor {}) "
             "and {} (tensor {})",
             i, ref, r.dim(), r.describe(), ref, t.describe(), i);
      for (int64_t k = 0; k < r.dim(); ++k)
        if (k != d && t.dim_size(k) != r.dim_size(k))
          fail(name(), loc,
               "expected tensor {} to match tensor {} in every dimension except dim {}, but got {} "
               "(tensor {}) and {} (tensor {}): dim {} is {} vs {}",
               i, ref, d, r.describe(), ref, t.describe(), i, k, r.dim_size(k), t.dim_size(k));
      shape[d] += t.dim_size(d);
    }
    return {{shape, result_type(in), r.device()}};
  }

  // The gradient only needs the inputs' shapes and dtypes, which the tape always keeps.
  Saves saves() const override { return {false, false}; }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor& g = ctx.grads[0];
    const int64_t d = wrap_dim(a_.dim, g.dim(), name());
    std::vector<Tensor> grads(ctx.input_metas.size());
    // Offsets as sizes, so a traced backward cuts each call's pieces (Note [size-free backward]).
    SymInt offset = 0;
    for (size_t i = 0; i < ctx.input_metas.size(); ++i) {
      const TensorMeta& m = ctx.input_metas[i];
      if (m.shape.size() == 1 && m.shape[0] == 0) {  // skipped by the forward
        if (ctx.needs_grad[i]) grads[i] = zeros(m.shape, {m.dtype, m.device});
        continue;
      }
      const SymInt size = ctx.size_of(i, d);
      if (ctx.needs_grad[i]) grads[i] = to_dtype(narrow(g, d, offset, size), m.dtype);
      offset = offset + size;
    }
    return grads;
  }

 private:
  detail::CatAttrs a_;
};

KILN_REGISTER_OP("cat", (OpSchema{{"tensors..."}, {"y"}, AutocastPolicy::kPromote}),
                 [](const Attrs& a) -> OpPtr { return std::make_shared<const CatOp>(a.i("dim")); });

}  // namespace

const detail::CatAttrs& detail::cat_attrs(const Op& op) {
  const auto* o = dynamic_cast<const CatOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("cat_attrs of op '") + op.name() + "'");
  return o->cat_attrs();
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, const Loc& loc) {
  return dispatch1(std::make_shared<const CatOp>(dim), tensors, loc);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim, const Loc& loc) {
  if (tensors.empty())
    fail("stack", loc, "expected a non-empty list of tensors, but got an empty one");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined())
      fail("stack", loc, "expected defined tensors, but got an undefined one at index {}", i);
    if (tensors[i].shape() != tensors[0].shape())
      fail("stack", loc,
           "expected all tensors to have the same shape, but got {} (tensor 0) and {} (tensor {})",
           tensors[0].describe(), tensors[i].describe(), i);
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack", loc);
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d, loc));
  return cat(parts, d, loc);
}

namespace {
int64_t split_dim(const char* op, const Tensor& x, int64_t dim, const Loc& loc) {
  if (x.dim() == 0)
    fail(op, loc, "expected a tensor with at least one dimension, but got {}", x.describe());
  return wrap_dim(dim, x.dim(), op, loc);
}
}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim, const Loc& loc) {
  const int64_t d = split_dim("split", x, dim, loc);
  const int64_t n = x.dim_size(d);
  if (split_size < 0 || (split_size == 0 && n > 0))
    fail("split", loc, "expected a positive split_size, but got {} for dim {} of {}", split_size, d,
         x.describe());
  const int64_t pieces =
      split_size == 0 ? 1 : std::max<int64_t>(1, (n + split_size - 1) / split_size);
  std::vector<Tensor> out;
  out.reserve(pieces);
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t start = i * split_size;
    out.push_back(narrow(x, d, start, std::min(split_size, n - start), loc));
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim,
                          const Loc& loc) {
  const int64_t d = split_dim("split", x, dim, loc);
  int64_t total = 0;
  bool negative = false;
  for (int64_t s : sizes) {
    total += s;
    negative = negative || s < 0;
  }
  if (negative || total != x.dim_size(d))
    fail("split", loc,
         "expected non-negative split sizes that add up to {} (dim {} of {}), but got {} (sum {})",
         x.dim_size(d), d, x.describe(), shape_str(sizes), total);
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, start, s, loc));
    start += s;
  }
  return out;
}

// Note [size lists]: the pieces are cut at sizes computed as SymInts, so a trace along a dynamic
// dim cuts each call's pieces; the number of pieces is a number, a guard in a trace (Note [size
// guards]: chunk(x, 3) traced at batch 11 gives 3 pieces, and a call with batch 2 gives 2).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim, const Loc& loc) {
  const int64_t d = split_dim("chunk", x, dim, loc);
  if (chunks <= 0)
    fail("chunk", loc, "expected a positive number of chunks, but got {} for {}", chunks,
         x.describe());
  const SymInt n = x.size(d);
  // As torch.chunk: an empty dim still gives `chunks` (empty) pieces.
  if (n == 0) return split(x, std::vector<int64_t>(chunks, 0), d, loc);
  const SymInt size = (n + (chunks - 1)) / chunks;
  const int64_t pieces = (n + size - 1) / size;
  std::vector<Tensor> out;
  out.reserve(pieces);
  for (int64_t i = 0; i < pieces; ++i) {
    const SymInt start = size * i;
    out.push_back(narrow(x, d, start, sym_min(size, n - start), loc));
  }
  return out;
}

}  // namespace kiln
