// Classification losses: the fused cross_entropy op, nll_loss (a composite), and the reference
// decomposition of cross_entropy that tests compare the fused op with.
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {

// Where the classes are: dim 1 of [N, C, d1, ...], dim 0 of an unbatched [C].
struct ClassLayout {
  int64_t class_dim = 1;
  int64_t classes = 0;
  bool probs = false;  // target holds probabilities of input's shape (else int64 indices)
  Shape loss_shape;    // per-position loss shape: input's without the class dim
};

// Shape [1, C, 1, ...] (or [C]): a per-class vector that broadcasts against the input.
Shape class_shape(const ClassLayout& cl, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(cl.class_dim)] = cl.classes;
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
  cl.classes = x.size(cl.class_dim);
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
      (weight.dim() != 1 || weight.size(0) != cl.classes || weight.dtype() != x.dtype()))
    fail(op, loc, "expected weight of shape [{}] and dtype {} for input {}, but got weight {}",
         cl.classes, dtype_name(x.dtype()), x.describe(), weight.describe());
  if (reduction == Reduction::BatchMean)
    fail(op, loc, "expected reduction none, mean or sum, but got batchmean (kl_div only) for {}",
         x.describe());
  return cl;
}

// Note [index checks] (indexing.cpp): class indices are checked in one serial pass before any
// parallel work, so a bad value is an Error naming it.
void check_target_values(const char* op, const Tensor& target, int64_t classes,
                         int64_t ignore_index, const Tensor& x, const Loc& loc) {
  const std::vector<int64_t> values = target.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] != ignore_index && (values[i] < 0 || values[i] >= classes))
      fail(op, loc,
           "expected class indices in [0, {}) (C = {}) or ignore_index {}, but got {} at position "
           "{} of target {} for input {}",
           classes, classes, ignore_index, values[i], i, target.describe(), x.describe());
}

// Per position (row along the class dim): loss_p = -sum_c w_c z_pc log_softmax(x)_pc with z the
// (smoothed) target distribution, and the weight that position adds to Mean's normalizer. The
// rows run in parallel into separate slots; the caller sums the slots in a fixed order.
template <class T>
void cross_entropy_rows(const Tensor& x, const Tensor& target, const std::vector<double>& w,
                        const ClassLayout& cl, int64_t ignore_index, double eps,
                        std::vector<double>& loss, std::vector<double>& norm) {
  using C = compute_t<T>;
  const T* px = static_cast<const T*>(x.raw_data());
  const int64_t classes = cl.classes;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < cl.class_dim) outer *= x.size(d);
    if (d > cl.class_dim) inner *= x.size(d);
  }
  auto read = [](const auto* p, int64_t k) { return static_cast<double>(static_cast<C>(p[k])); };
  const double uniform = classes > 0 ? eps / static_cast<double>(classes) : 0.0;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(classes, 1));
  parallel_for(0, outer * inner, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t start = (p / inner) * classes * inner + p % inner;
      const T* row = px + start;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < classes; ++c) {
        const double v = read(row, c * inner);
        if (v > m || std::isnan(v)) m = v;
        if (std::isnan(m)) break;
      }
      double s = 0;
      for (int64_t c = 0; c < classes; ++c) s += std::exp(read(row, c * inner) - m);
      const double lse = m + std::log(s);
      if (cl.probs) {
        const T* trow = static_cast<const T*>(target.raw_data()) + start;
        double acc = 0;
        for (int64_t c = 0; c < classes; ++c) {
          const double z = read(trow, c * inner) * (1 - eps) + uniform;
          acc -= w[c] * z * (read(row, c * inner) - lse);
        }
        loss[p] = acc;
        norm[p] = 1;
        continue;
      }
      const int64_t t = static_cast<const int64_t*>(target.raw_data())[p];
      if (t == ignore_index) {
        loss[p] = norm[p] = 0;
        continue;
      }
      double acc = -(1 - eps) * w[t] * (read(row, t * inner) - lse);
      if (eps > 0)
        for (int64_t c = 0; c < classes; ++c) acc -= uniform * w[c] * (read(row, c * inner) - lse);
      loss[p] = acc;
      norm[p] = w[t];
    }
  });
}

// Note [fused cross entropy]: one pass computes log-softmax and the loss, never materializing
// log-probabilities. The gradient needs only the inputs: with y = w * z (weighted target
// distribution, z = valid one-hot (1 - eps) + valid * eps / C, or the smoothed probabilities),
// d loss_p / d x_pc = softmax(x)_pc * sum_c y_pc - y_pc, times the reduction's scale. The vjp
// builds exactly that from public ops, so higher-order gradients work.
class CrossEntropyOp final : public Op {
 public:
  CrossEntropyOp(int64_t ignore_index, Reduction reduction, double label_smoothing)
      : ignore_index_(ignore_index), reduction_(reduction), label_smoothing_(label_smoothing) {}
  const char* name() const override { return "cross_entropy"; }
  nlohmann::json attrs() const override {
    return {{"ignore_index", ignore_index_},
            {"reduction", reduction_name(reduction_)},
            {"label_smoothing", attr_double(label_smoothing_)}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    ClassLayout cl = check_class_args(name(), x, in[1], in.size() > 2 ? in[2] : Tensor(), true,
                                      ignore_index_, reduction_, loc);
    if (!(label_smoothing_ >= 0.0 && label_smoothing_ <= 1.0))
      fail(name(), loc, "expected label_smoothing in [0, 1], but got {} for input {}",
           label_smoothing_, x.describe());
    Shape out = reduction_ == Reduction::None ? cl.loss_shape : Shape{};
    return {{out, x.dtype(), x.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    Tensor x = in[0], target = in[1];
    {
      NoGradGuard no_grad;
      x = contiguous(x);
      target = contiguous(target);
    }
    const ClassLayout cl = layout(x, target);
    if (!cl.probs)
      check_target_values(name(), target, cl.classes, ignore_index_, x, kernel_call_site());
    std::vector<double> w(static_cast<size_t>(cl.classes), 1.0);
    if (in.size() > 2) w = in[2].to_vector<double>();
    const int64_t positions = shape_numel(cl.loss_shape);
    std::vector<double> loss(static_cast<size_t>(positions)), norm(loss.size());
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<compute_t<T>>) {
        cross_entropy_rows<T>(x, target, w, cl, ignore_index_, label_smoothing_, loss, norm);
        T* po = static_cast<T*>(out[0].raw_data());
        if (reduction_ == Reduction::None) {
          for (int64_t p = 0; p < positions; ++p) po[p] = static_cast<T>(loss[p]);
          return;
        }
        double total = 0, denom = 0;
        for (int64_t p = 0; p < positions; ++p) {
          total += loss[p];
          denom += norm[p];
        }
        // Mean over nothing (all ignored, or no positions) is 0 / 0 = NaN, as in PyTorch.
        *po = static_cast<T>(reduction_ == Reduction::Mean ? total / denom : total);
      }
    });
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &x = ctx.inputs[0], &t = ctx.inputs[1], &g = ctx.grads[0];
    const bool has_weight = ctx.inputs.size() > 2;
    const ClassLayout cl = layout(x, t);
    const int64_t cd = cl.class_dim;
    const double eps = label_smoothing_, uniform = eps / static_cast<double>(cl.classes);
    const Shape wshape = class_shape(cl, x.dim());
    const Tensor wv = has_weight ? reshape(ctx.inputs[2], wshape) : Tensor();
    // z: the target distribution without class weights; denom: Mean's normalizer.
    Tensor z, onehot, denom, valid;
    if (cl.probs) {
      z = eps > 0 ? add(mul(t, 1 - eps), uniform) : t;
    } else {
      valid = unsqueeze(ne(t, static_cast<double>(ignore_index_)), cd);
      const Tensor classes = reshape(
          arange(static_cast<double>(cl.classes), TensorOptions{DType::Int64, x.device()}), wshape);
      onehot = to_dtype(logical_and(eq(unsqueeze(t, cd), classes), valid), x.dtype());
      z = eps > 0 ? add(mul(onehot, 1 - eps), mul(to_dtype(valid, x.dtype()), uniform)) : onehot;
      denom = sum(has_weight ? mul(onehot, wv) : onehot);
      // Every target ignored (or weighted 0): the loss is 0 / 0 = nan, as in PyTorch, but no
      // element contributes, so the gradient is 0, as PyTorch's; dividing by 0 would make it nan.
      denom = where(eq(denom, 0.0), 1.0, denom);
    }
    const Tensor y = has_weight ? mul(z, wv) : z;
    Tensor gs = g;  // the upstream gradient times the reduction's scale, broadcastable to x
    if (reduction_ == Reduction::None) gs = unsqueeze(g, cd);
    if (reduction_ == Reduction::Mean)
      gs = cl.probs ? div(g, static_cast<double>(shape_numel(cl.loss_shape))) : div(g, denom);

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
      if (!cl.probs && reduction_ == Reduction::Mean) {
        // denom = sum_c w_c count_c depends on the weights too.
        const Tensor value = div(sum(mul(per, wv)), denom);
        gw = sub(gw, mul(mul(gs, value), sum_to(onehot, wshape)));
      }
      grads[2] = reshape(gw, {cl.classes});
    }
    return grads;
  }

 private:
  ClassLayout layout(const Tensor& x, const Tensor& target) const {
    return check_class_args(name(), x, target, Tensor(), true, ignore_index_, reduction_,
                            kernel_call_site());
  }

  int64_t ignore_index_;
  Reduction reduction_;
  double label_smoothing_;
};

KILN_REGISTER_OP("cross_entropy", (OpSchema{{"input", "target", "weight?"}, {"loss"}}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const CrossEntropyOp>(
                       a.i("ignore_index"), reduction_from_string(a.s("reduction")),
                       a.f("label_smoothing"));
                 });

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
    wt = mul(reshape(index_select(weight, 0, reshape(safe, {-1}, loc), loc), target.shape(), loc),
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
      weight.defined() ? reshape(weight, class_shape(cl, logits.dim()), loc) : Tensor();
  if (cl.probs) {
    const Tensor z = eps > 0 ? add(mul(target, 1 - eps, loc), uniform, loc) : target;
    Tensor prod = mul(lp, z, loc);
    if (wv.defined()) prod = mul(prod, wv, loc);
    const Tensor per = neg(sum(prod, {cd}, false, loc), loc);
    const auto positions = static_cast<double>(shape_numel(cl.loss_shape));
    return apply_class_reduction(per, scalar_like(positions, per), reduction, loc);
  }
  const Tensor nll = nll_loss(lp, target, weight, ignore_index, reduction, loc);
  if (eps == 0) return nll;
  const Tensor valid = ne(target, static_cast<double>(ignore_index), loc);
  Tensor smooth = neg(sum(wv.defined() ? mul(lp, wv, loc) : lp, {cd}, false, loc), loc);
  smooth = where(valid, smooth, 0.0, loc);
  Tensor wt = to_dtype(valid, logits.dtype(), loc);
  if (weight.defined()) {
    const Tensor safe = reshape(where(valid, target, 0.0, loc), {-1}, loc);
    wt = mul(reshape(index_select(weight, 0, safe, loc), target.shape(), loc), wt, loc);
  }
  const Tensor ret = apply_class_reduction(smooth, sum(wt, {}, false, loc), reduction, loc);
  return add(mul(nll, 1 - eps, loc), mul(ret, uniform, loc), loc);
}

}  // namespace reference

}  // namespace kiln
