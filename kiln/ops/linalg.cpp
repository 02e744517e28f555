// bmm's definition (attributes, infer, vjp) and the checks matmul, bmm and linear share. bmm's
// kernel is in kiln/backend/onednn/linalg_ops.cpp (Note [kernel table]); matmul and linear
// (matmul.cpp) are composites over bmm.
#include "kiln/ops/linalg.h"

#include <vector>

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

// "float32[2, 3]": matmul errors put two of these around an '@', so the device is left out.
std::string detail::matmul_desc(const Tensor& t) {
  return dtype_name(t.dtype()) + shape_str(t.shape());
}

// Checks shared by matmul, bmm and linear: rank (min_rank..max_rank), one floating dtype, inner
// sizes.
void detail::check_matmul_operands(const char* op, const Tensor& a, const Tensor& b,
                                   int64_t min_rank, int64_t max_rank, const Loc& loc) {
  for (const Tensor* t : {&a, &b}) {
    if (t->dim() < min_rank || t->dim() > max_rank) {
      if (min_rank == max_rank)
        fail(op, loc, "expected {}-D tensors, but got {} and {}", min_rank, a.describe(),
             b.describe());
      fail(op, loc, "expected tensors of at least {} dimension, but got {} and {}", min_rank,
           a.describe(), b.describe());
    }
  }
  if (a.dtype() != b.dtype())
    fail(op, loc, "expected both operands to have the same dtype, but got {} and {}", a.describe(),
         b.describe());
  if (!is_floating(a.dtype()))
    fail(op, loc, "expected floating-point operands (unsupported dtype {}), but got {} and {}",
         dtype_name(a.dtype()), a.describe(), b.describe());
  const int64_t ka = a.dim_size(-1);
  const int64_t kb = b.dim() == 1 ? b.dim_size(0) : b.dim_size(-2);
  if (ka != kb)
    fail(op, loc, "expected the inner dimensions to match, but got {} @ {} ({} != {})",
         detail::matmul_desc(a), detail::matmul_desc(b), ka, kb);
}

namespace {

void check_operands(const char* op, const Tensor& a, const Tensor& b, int64_t min_rank,
                    int64_t max_rank, const Loc& loc) {
  detail::check_matmul_operands(op, a, b, min_rank, max_rank, loc);
}

class BmmOp final : public Op {
 public:
  const char* name() const override { return "bmm"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &a = in[0], &b = in[1];
    check_operands(name(), a, b, 3, 3, loc);
    if (a.dim_size(0) != b.dim_size(0))
      fail(name(), loc, "expected equal batch sizes, but got {} and {} ({} != {})", a.describe(),
           b.describe(), a.dim_size(0), b.dim_size(0));
    return {{{a.dim_size(0), a.dim_size(1), b.dim_size(2)}, a.dtype(), a.device()}};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(in[0].dim_size(2));
  }

  // Each operand's gradient reads only the other one, as for mul.
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    return {
        true, false, ~uint64_t{0},
        (needs_grad[1] ? uint64_t{1} : uint64_t{0}) | (needs_grad[0] ? uint64_t{2} : uint64_t{0})};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1], &g = ctx.grads[0];
    Tensor ga, gb;
    if (ctx.needs_grad[0]) ga = bmm(g, transpose(b, -1, -2));
    if (ctx.needs_grad[1]) gb = bmm(transpose(a, -1, -2), g);
    return {ga, gb};
  }
};

KILN_REGISTER_OP("bmm", (OpSchema{{"a", "b"}, {"y"}, AutocastPolicy::kLowPrecision}),
                 no_attrs<BmmOp>());

}  // namespace

Tensor bmm(const Tensor& a, const Tensor& b, const Loc& loc) {
  return call_op<BmmOp>({a, b}, loc);
}

}  // namespace kiln
