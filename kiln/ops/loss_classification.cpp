// Classification losses: the fused cross_entropy op (its CPU kernel is in
// kiln/backend/cpu/loss_ops.cpp, Note [kernel table]), nll_loss (a composite), and the reference
// decomposition of cross_entropy that tests compare the fused op with.
#include <vector>

#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/loss_ops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

// The positions a class loss averages over: every element but the class dim, as a size (Note
// [size-free backward]), so a traced mean divides by each call's batch.
SymInt positions(const SymSizes& sizes, int64_t class_dim) {
  SymInt n = 1;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (static_cast<int64_t>(d) != class_dim) n = n * sizes[d];
  return n;
}

using detail::check_target_values;
using detail::ClassLayout;

// Shape [1, C, 1, ...] (or [C]): a per-class vector that broadcasts against the input.
Shape class_shape(const ClassLayout& cl, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(cl.class_dim)] = cl.classes;
  return s;
}

// The same for a reshape: -1 for the classes, so that no size is written into a trace (an
// unbatched input's class dim is its leading one; Note [size-free backward]).
Shape class_view(const ClassLayout& cl, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(cl.class_dim)] = -1;
  return s;
}

// Argument checks shared by the fused op's inference, nll_loss and the reference. Errors name the
// shapes and dtypes of the offending arguments.
ClassLayout check_class_args(const char* op, const Tensor& x, const Tensor& target,
                             const Tensor& weight, bool allow_probs, int64_t ignore_index,
                             Reduction reduction, const Loc& loc) {
  if (!is_floating(x.dtype()) || x.dim() == 0)
    fail(op, loc, "expected a floating-point input of shape [N, C, d1, ...] or [C], but got {}",
         x.describe());
  ClassLayout cl;
  cl.class_dim = x.dim() == 1 ? 0 : 1;
  cl.classes = x.dim_size(cl.class_dim);
  cl.loss_shape = x.shape();
  cl.loss_shape.erase(cl.loss_shape.begin() + cl.class_dim);
  const DType td = target.dtype();
  if (td == DType::Int64) {
    if (target.shape() != cl.loss_shape)
      fail(op, loc, "expected target of shape {} for input {}, but got {}",
           shape_str(cl.loss_shape), x.describe(), target.describe());
  } else if (is_floating(td) && allow_probs) {
    if (target.shape() != x.shape() || td != x.dtype())
      fail(op, loc,
           "expected target of int64 class indices of shape {} or of class probabilities with the "
           "shape and dtype of input {}, but got {}",
           shape_str(cl.loss_shape), x.describe(), target.describe());
    if (ignore_index >= 0)
      fail(op, loc,
           "expected a negative ignore_index with a class-probabilities target (nothing can be "
           "ignored), but got ignore_index {} for target {}",
           ignore_index, target.describe());
    cl.probs = true;
  } else {
    fail(op, loc, "expected target of int64 class indices of shape {}{} for input {}, but got {}",
         shape_str(cl.loss_shape), allow_probs ? " (or floating-point probabilities)" : "",
         x.describe(), target.describe());
  }
  if (weight.defined() &&
      (weight.dim() != 1 || weight.dim_size(0) != cl.classes || weight.dtype() != x.dtype()))
    fail(op, loc, "expected weight of shape [{}] and dtype {} for input {}, but got weight {}",
         cl.classes, dtype_name(x.dtype()), x.describe(), weight.describe());
  if (reduction == Reduction::BatchMean)
    fail(op, loc, "expected reduction none, mean or sum, but got batchmean (kl_div only) for {}",
         x.describe());
  return cl;
}

// Note [fused cross entropy]: one pass computes log-softmax and the loss, never materializing
// log-probabilities. The gradient needs only the inputs: with y = w * z (weighted target
// distribution, z = valid one-hot (1 - eps) + valid * eps / C, or the smoothed probabilities),
// d loss_p / d x_pc = softmax(x)_pc * sum_c y_pc - y_pc, times the reduction's scale. The vjp
// builds exactly that from public ops, so higher-order gradients work.
class CrossEntropyOp final : public Op {
 public:
  CrossEntropyOp(int64_t ignore_index, Reduction reduction, double label_smoothing)
      : a_{ignore_index, reduction, label_smoothing} {}
  const detail::CrossEntropyAttrs& cross_entropy_attrs() const { return a_; }
  const char* name() const override { return "cross_entropy"; }
  nlohmann::json attrs() const override {
    return {{"ignore_index", a_.ignore_index},
            {"reduction", reduction_name(a_.reduction)},
            {"label_smoothing", attr_double(a_.label_smoothing)}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    ClassLayout cl = check_class_args(name(), x, in[1], in.size() > 2 ? in[2] : Tensor(), true,
                                      a_.ignore_index, a_.reduction, loc);
    if (!(a_.label_smoothing >= 0.0 && a_.label_smoothing <= 1.0))
      fail(name(), loc, "expected label_smoothing in [0, 1], but got {} for input {}",
           a_.label_smoothing, x.describe());
    Shape out = a_.reduction == Reduction::None ? cl.loss_shape : Shape{};
    return {{out, x.dtype(), x.device()}};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &x = ctx.inputs[0], &t = ctx.inputs[1], &g = ctx.grads[0];
    const bool has_weight = ctx.inputs.size() > 2;
    const ClassLayout cl = layout(x, t);
    const int64_t cd = cl.class_dim;
    const double eps = a_.label_smoothing;
    // eps / C, with C a size (Note [size-free backward]): an unbatched input's classes are dim 0.
    auto uniform = [&](const Tensor& t) { return div(mul(t, eps), ctx.size_of(0, cd)); };
    const Shape wshape = class_shape(cl, x.dim());
    const Tensor wv = has_weight ? reshape(ctx.inputs[2], class_view(cl, x.dim())) : Tensor();
    // z: the target distribution without class weights; denom: Mean's normalizer.
    Tensor z, onehot, denom, valid;
    if (cl.probs) {
      z = eps > 0 ? add(mul(t, 1 - eps), uniform(ones_like(t))) : t;
    } else {
      valid = unsqueeze(ne(t, static_cast<double>(a_.ignore_index)), cd);
      const Tensor classes = reshape(arange(x.size(cd), TensorOptions{DType::Int64, x.device()}),
                                     class_view(cl, x.dim()));
      onehot = to_dtype(logical_and(eq(unsqueeze(t, cd), classes), valid), x.dtype());
      z = eps > 0 ? add(mul(onehot, 1 - eps), uniform(to_dtype(valid, x.dtype()))) : onehot;
      denom = sum(has_weight ? mul(onehot, wv) : onehot);
      // Every target ignored (or weighted 0): the loss is 0 / 0 = nan, as in PyTorch, but no
      // element contributes, so the gradient is 0, as PyTorch's; dividing by 0 would make it nan.
      denom = where(eq(denom, 0.0), 1.0, denom);
    }
    const Tensor y = has_weight ? mul(z, wv) : z;
    Tensor gs = g;  // the upstream gradient times the reduction's scale, broadcastable to x
    if (a_.reduction == Reduction::None) gs = unsqueeze(g, cd);
    if (a_.reduction == Reduction::Mean)
      gs = cl.probs ? div(g, positions(ctx.sizes_of(0), cd)) : div(g, denom);

    std::vector<Tensor> grads(ctx.inputs.size());
    if (ctx.needs_grad[0]) {
      grads[0] = mul(gs, sub(mul(softmax(x, cd), sum(y, {cd}, true)), y));
      // An ignored position's gradient is exactly 0, as PyTorch's, even when the incoming
      // gradient is not finite (the mean over nothing is nan, and so is anything computed from it).
      if (!cl.probs) grads[0] = where(valid, grads[0], 0.0);
    }
    if (cl.probs && ctx.needs_grad[1]) {
      Tensor d = mul(log_softmax(x, cd), -(1 - eps));
      grads[1] = mul(gs, has_weight ? mul(d, wv) : d);
    }
    if (has_weight && ctx.needs_grad[2]) {
      // loss = sum_pc w_c per_pc (/ denom), per = -z * log_softmax(x).
      const Tensor per = neg(mul(z, log_softmax(x, cd)));
      Tensor gw = sum_to(mul(gs, per), wshape);
      if (!cl.probs && a_.reduction == Reduction::Mean) {
        // denom = sum_c w_c count_c depends on the weights too.
        const Tensor value = div(sum(mul(per, wv)), denom);
        gw = sub(gw, mul(mul(gs, value), sum_to(onehot, wshape)));
      }
      grads[2] = reshape(gw, {-1});
    }
    return grads;
  }

  // The layout of checked arguments (the kernel's, the vjp's).
  ClassLayout layout(const Tensor& x, const Tensor& target) const {
    return check_class_args(name(), x, target, Tensor(), true, a_.ignore_index, a_.reduction,
                            kernel_call_site());
  }

 private:
  detail::CrossEntropyAttrs a_;
};

KILN_REGISTER_OP("cross_entropy",
                 (OpSchema{{"input", "target", "weight?"}, {"loss"}, AutocastPolicy::kFloat32}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const CrossEntropyOp>(
                       a.i("ignore_index"), reduction_from_string(a.s("reduction")),
                       a.f("label_smoothing"));
                 });

}  // namespace

const detail::CrossEntropyAttrs& detail::cross_entropy_attrs(const Op& op) {
  const auto* c = dynamic_cast<const CrossEntropyOp*>(&op);
  KILN_INTERNAL_ASSERT(c != nullptr, std::string("cross_entropy_attrs of op '") + op.name() + "'");
  return c->cross_entropy_attrs();
}

detail::ClassLayout detail::cross_entropy_layout(const Op& op, const Tensor& x,
                                                 const Tensor& target) {
  const auto* c = dynamic_cast<const CrossEntropyOp*>(&op);
  KILN_INTERNAL_ASSERT(c != nullptr, std::string("cross_entropy_layout of op '") + op.name() + "'");
  return c->layout(x, target);
}

// Note [index checks] (indexing.cpp): class indices are checked in one serial pass before any
// parallel work, so a bad value is an Error naming it.
void detail::check_target_values(const char* op, const Tensor& target, int64_t classes,
                                 int64_t ignore_index, const Tensor& x, const Loc& loc) {
  const std::vector<int64_t> values = target.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] != ignore_index && (values[i] < 0 || values[i] >= classes))
      fail(op, loc,
           "expected class indices in [0, {}) (C = {}) or ignore_index {}, but got {} at position "
           "{} of target {} for input {}",
           classes, classes, ignore_index, values[i], i, target.describe(), x.describe());
}

namespace {

Tensor apply_class_reduction(const Tensor& loss, const Tensor& normalizer, Reduction reduction,
                             const Loc& loc) {
  if (reduction == Reduction::None) return loss;
  if (reduction == Reduction::Sum) return sum(loss, {}, false, loc);
  return div(sum(loss, {}, false, loc), normalizer, loc);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     int64_t ignore_index, Reduction reduction, double label_smoothing,
                     const Loc& loc) {
  std::vector<Tensor> inputs{logits, target};
  if (weight.defined()) inputs.push_back(weight);
  return call_op<CrossEntropyOp>(inputs, loc, ignore_index, reduction, label_smoothing);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                int64_t ignore_index, Reduction reduction, const Loc& loc) {
  const ClassLayout cl =
      check_class_args("nll_loss", log_probs, target, weight, false, ignore_index, reduction, loc);
  if (!target.is_meta())
    check_target_values("nll_loss", target, cl.classes, ignore_index, log_probs, loc);
  const int64_t cd = cl.class_dim;
  const Tensor valid = ne(target, static_cast<double>(ignore_index), loc);
  const Tensor safe = where(valid, target, 0.0, loc);  // ignored positions read class 0
  const Tensor picked = squeeze(gather(log_probs, cd, unsqueeze(safe, cd, loc), loc), cd, loc);
  Tensor wt = to_dtype(valid, log_probs.dtype(), loc);
  if (weight.defined())
    wt = mul(reshape(index_select(weight, 0, reshape(safe, {-1}, loc), loc), target.sizes(), loc),
             wt, loc);
  // where, not a product with the 0 weight: an ignored position's gradient is exactly 0, as
  // PyTorch's, even when the incoming one is nan (the mean over nothing is 0 / 0).
  return apply_class_reduction(where(valid, neg(mul(picked, wt, loc), loc), 0.0, loc),
                               sum(wt, {}, false, loc), reduction, loc);
}

namespace reference {

// PyTorch 1.13's composite (cross_entropy_loss_label_smoothing / _prob_target in LossNLL.cpp).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     int64_t ignore_index, Reduction reduction, double label_smoothing,
                     const Loc& loc) {
  const ClassLayout cl =
      check_class_args("cross_entropy", logits, target, weight, true, ignore_index, reduction, loc);
  const int64_t cd = cl.class_dim;
  const double eps = label_smoothing, uniform = eps / static_cast<double>(cl.classes);
  const Tensor lp = log_softmax(logits, cd, loc);
  const Tensor wv =
      weight.defined() ? reshape(weight, class_view(cl, logits.dim()), loc) : Tensor();
  if (cl.probs) {
    const Tensor z = eps > 0 ? add(mul(target, 1 - eps, loc), uniform, loc) : target;
    Tensor prod = mul(lp, z, loc);
    if (wv.defined()) prod = mul(prod, wv, loc);
    const Tensor per = neg(sum(prod, {cd}, false, loc), loc);
    if (reduction == Reduction::Mean)
      return div(sum(per, {}, false, loc), positions(logits.sizes(), cd), loc);
    return apply_class_reduction(per, Tensor(), reduction, loc);
  }
  const Tensor nll = nll_loss(lp, target, weight, ignore_index, reduction, loc);
  if (eps == 0) return nll;
  const Tensor valid = ne(target, static_cast<double>(ignore_index), loc);
  Tensor smooth = neg(sum(wv.defined() ? mul(lp, wv, loc) : lp, {cd}, false, loc), loc);
  smooth = where(valid, smooth, 0.0, loc);
  Tensor wt = to_dtype(valid, logits.dtype(), loc);
  if (weight.defined()) {
    const Tensor safe = reshape(where(valid, target, 0.0, loc), {-1}, loc);
    wt = mul(reshape(index_select(weight, 0, safe, loc), target.sizes(), loc), wt, loc);
  }
  const Tensor ret = apply_class_reduction(smooth, sum(wt, {}, false, loc), reduction, loc);
  return add(mul(nll, 1 - eps, loc), mul(ret, uniform, loc), loc);
}

}  // namespace reference

}  // namespace kiln
