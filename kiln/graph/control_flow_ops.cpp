// The ops traced control flow records: "cond" and "while_loop" (Note [control flow] in
// control_flow.h). Composite ops (Note [composite ops]): their kernels run subgraphs through the
// graph executor, past every mode, so a mode sees one node.
#include "kiln/graph/control_flow_ops.h"

#include <fmt/format.h>

#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"
#include "kiln/graph/control_flow.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/serialize.h"
#include "kiln/graph/tracer.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/composite_op.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::graph {

namespace {

using Tensors = std::vector<Tensor>;

Tensors slice(const Tensors& v, size_t begin, size_t count) {
  return Tensors(v.begin() + static_cast<std::ptrdiff_t>(begin),
                 v.begin() + static_cast<std::ptrdiff_t>(begin + count));
}

// The subgraph's outputs' metadata for these inputs: a shape-only run on meta stand-ins, past
// every mode (nothing recorded, nothing drawn).
Tensors shape_run(const Graph& g, const Tensors& inputs, const char* op, const Loc& loc) {
  Tensors metas;
  for (const Tensor& t : inputs) metas.push_back(t.is_meta() ? t : t.to(kMeta));
  ::kiln::detail::CompositeScope scope;
  // Meta inputs beside the subgraph's own real constants (a `full` node), as in a trace.
  ::kiln::detail::MixedMetaScope mixed;
  try {
    return run(g, metas, loc);
  } catch (const Error& e) {
    fail(op, loc, "its subgraph '{}' cannot run on these inputs: {}", g.name, e.what());
  }
}

void check_pred(const Tensor& pred, const char* op, const Loc& loc) {
  if (!pred.defined() || pred.numel() != 1 ||
      !(pred.dtype() == DType::Bool || is_floating(pred.dtype()) || pred.dtype() == DType::Int64 ||
        pred.dtype() == DType::Int32))
    fail(op, loc, "expected a predicate of one bool or number element, but got {}",
         pred.defined() ? pred.describe() : "an undefined tensor");
}

std::vector<TensorMeta> metas_of(const Tensors& ts) {
  std::vector<TensorMeta> out;
  for (const Tensor& t : ts) out.push_back({t.shape(), t.dtype(), kCPU});
  return out;
}

// Outputs are new, dense tensors (Note [composite ops]): a branch that returns an operand or a
// view of it hands out a copy.
Tensors as_new_outputs(Tensors outs, const Tensors& inputs) {
  for (Tensor& o : outs) {
    bool aliases = !o.is_contiguous();
    for (const Tensor& t : inputs) aliases = aliases || (t.defined() && t.storage() == o.storage());
    if (aliases) o = clone(o);
  }
  return outs;
}

std::string typed(const Tensor& t) {
  return fmt::format("{}{}", dtype_name(t.dtype()), shape_str(t.shape()));
}

class CondOp final : public CompositeOp {
 public:
  CondOp(std::shared_ptr<const Graph> then_g, std::shared_ptr<const Graph> else_g, int64_t n)
      : then_(std::move(then_g)), else_(std::move(else_g)), n_(static_cast<size_t>(n)) {
    if (n < 0 || then_->inputs.size() < n_ || else_->inputs.size() < n_)
      throw Error(fmt::format("[cond] expected subgraphs taking the {} operands first", n));
  }
  const char* name() const override { return "cond"; }
  std::vector<std::shared_ptr<const Graph>> subgraphs() const { return {then_, else_}; }
  nlohmann::json attrs() const override {
    return {{"then", to_json(*then_)}, {"else", to_json(*else_)}, {"operands", n_}};
  }
  size_t then_extra() const { return then_->inputs.size() - n_; }
  size_t else_extra() const { return else_->inputs.size() - n_; }
  Tensors then_inputs(const Tensors& in) const {
    Tensors a = slice(in, 1, n_);
    for (const Tensor& t : slice(in, 1 + n_, then_extra())) a.push_back(t);
    return a;
  }
  Tensors else_inputs(const Tensors& in) const {
    Tensors a = slice(in, 1, n_);
    for (const Tensor& t : slice(in, 1 + n_ + then_extra(), else_extra())) a.push_back(t);
    return a;
  }

  std::vector<TensorMeta> infer(const Tensors& in, const Loc& loc) const override {
    if (in.size() != 1 + n_ + then_extra() + else_extra())
      fail(name(), loc, "expected {} inputs (pred, {} operands, {} + {} captured), but got {}",
           1 + n_ + then_extra() + else_extra(), n_, then_extra(), else_extra(), in.size());
    check_pred(in[0], name(), loc);
    const Tensors a = shape_run(*then_, then_inputs(in), name(), loc);
    const Tensors b = shape_run(*else_, else_inputs(in), name(), loc);
    if (a.size() != b.size())
      fail(name(), loc, "expected then_fn and else_fn to return as many tensors, but got {} and {}",
           a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].dtype() != b[i].dtype() || a[i].shape() != b[i].shape())
        fail(name(), loc,
             "expected then_fn and else_fn to return tensors of the same dtypes and shapes, but "
             "output {} is {} from then_fn and {} from else_fn",
             i, typed(a[i]), typed(b[i]));
    std::vector<TensorMeta> metas = metas_of(a);
    for (TensorMeta& m : metas) m.device = in[0].device();
    return metas;
  }

  Tensors decompose(const Tensors& in) const override {
    const bool take_then = in[0].item() != 0;
    return as_new_outputs(run(take_then ? *then_ : *else_,
                              take_then ? then_inputs(in) : else_inputs(in), kernel_call_site()),
                          in);
  }

  // The gradient is a cond over the branches' gradients (Note [control flow]).
  Tensors vjp(const VjpContext& ctx) const override {
    const size_t k = ctx.inputs.size() - 1;
    std::vector<size_t> wanted;  // the inputs (after pred) asked a gradient
    for (size_t j = 0; j < k; ++j)
      if (ctx.needs_grad[j + 1]) wanted.push_back(j);
    Tensors args = slice(ctx.inputs, 1, k);
    for (const Tensor& g : ctx.grads) args.push_back(g);
    auto grads_of = [this, k, wanted, create = ctx.create_graph](bool then_branch,
                                                                 bool keep_undefined) {
      return [this, k, wanted, create, then_branch, keep_undefined](const Tensors& a) {
        EnableGradGuard enable;
        Tensors xs = slice(a, 0, k), gs = slice(a, k, a.size() - k);
        // Leaves for the wanted inputs this branch reads.
        const size_t first = n_ + (then_branch ? 0 : then_extra());
        const size_t extra = then_branch ? then_extra() : else_extra();
        Tensors sub_in;
        std::vector<std::pair<size_t, Tensor>> leaves;
        auto take = [&](size_t j) {
          Tensor x = xs[j];
          if (std::find(wanted.begin(), wanted.end(), j) != wanted.end()) {
            x = detach(xs[j]);
            x.set_requires_grad(true);
            leaves.emplace_back(j, x);
          }
          sub_in.push_back(x);
        };
        for (size_t j = 0; j < n_; ++j) take(j);
        for (size_t j = first; j < first + extra; ++j) take(j);
        const Tensors ys = run(then_branch ? *then_ : *else_, sub_in);
        Tensors outs, seeds, inputs;
        for (size_t i = 0; i < ys.size(); ++i)
          if (ys[i].requires_grad()) outs.push_back(ys[i]), seeds.push_back(gs[i]);
        for (const auto& l : leaves) inputs.push_back(l.second);
        Tensors found;
        if (!outs.empty() && !inputs.empty())
          found = kiln::grad(outs, inputs, seeds, false, create, true);
        Tensors result;
        for (size_t j : wanted) {
          Tensor g;
          for (size_t i = 0; i < leaves.size(); ++i)
            if (leaves[i].first == j && i < found.size()) g = found[i];
          result.push_back(g.defined() || keep_undefined ? g : zeros_like(xs[j]));
        }
        return result;
      };
    };
    Tensors result(ctx.inputs.size());
    if (wanted.empty()) return result;
    // With a real predicate and nothing tracing, the taken branch's gradients are computed
    // directly, as eager backward computes them: an input that branch does not use gets no
    // gradient (undefined, as in eager), not zeros. A traced backward (the predicate a stand-in)
    // needs both branches to give tensors of one shape, so there an unused input's gradient is
    // zeros.
    Tensors grads;
    if (!ctx.inputs[0].is_meta() && !Tracer::active()) {
      check_pred(ctx.inputs[0], name(), ctx.loc);
      grads = grads_of(ctx.inputs[0].item() != 0, true)(args);
    } else {
      grads =
          kiln::cond(ctx.inputs[0], grads_of(true, false), grads_of(false, false), args, ctx.loc);
    }
    for (size_t i = 0; i < wanted.size(); ++i) result[wanted[i] + 1] = grads[i];
    return result;
  }

 private:
  std::shared_ptr<const Graph> then_, else_;
  size_t n_;
};

class WhileOp final : public CompositeOp {
 public:
  WhileOp(std::shared_ptr<const Graph> cond_g, std::shared_ptr<const Graph> body_g, int64_t n,
          int64_t max_iterations)
      : cond_(std::move(cond_g)),
        body_(std::move(body_g)),
        n_(static_cast<size_t>(n)),
        max_(max_iterations) {
    if (n < 0 || cond_->inputs.size() < n_ || body_->inputs.size() < n_ || max_iterations < 0)
      throw Error(fmt::format(
          "[while_loop] expected subgraphs taking the {} loop vars first and max_iterations >= 0",
          n));
  }
  const char* name() const override { return "while_loop"; }
  std::vector<std::shared_ptr<const Graph>> subgraphs() const { return {cond_, body_}; }
  nlohmann::json attrs() const override {
    return {{"cond", to_json(*cond_)},
            {"body", to_json(*body_)},
            {"loop_vars", n_},
            {"max_iterations", max_}};
  }
  size_t cond_extra() const { return cond_->inputs.size() - n_; }
  size_t body_extra() const { return body_->inputs.size() - n_; }
  Tensors with_extra(const Tensors& vars, const Tensors& in, bool body) const {
    Tensors a = vars;
    const size_t first = n_ + (body ? cond_extra() : 0);
    for (const Tensor& t : slice(in, first, body ? body_extra() : cond_extra())) a.push_back(t);
    return a;
  }

  std::vector<TensorMeta> infer(const Tensors& in, const Loc& loc) const override {
    if (in.size() != n_ + cond_extra() + body_extra())
      fail(name(), loc, "expected {} inputs ({} loop vars, {} + {} captured), but got {}",
           n_ + cond_extra() + body_extra(), n_, cond_extra(), body_extra(), in.size());
    const Tensors vars = slice(in, 0, n_);
    const Tensors p = shape_run(*cond_, with_extra(vars, in, false), name(), loc);
    if (p.size() != 1)
      fail(name(), loc, "expected cond_fn to return one tensor, but it returns {}", p.size());
    check_pred(p[0], name(), loc);
    const Tensors b = shape_run(*body_, with_extra(vars, in, true), name(), loc);
    if (b.size() != n_)
      fail(name(), loc, "expected body_fn to return the {} loop vars, but it returns {} tensors",
           n_, b.size());
    for (size_t i = 0; i < n_; ++i)
      if (b[i].dtype() != vars[i].dtype() || b[i].shape() != vars[i].shape())
        fail(name(), loc,
             "expected body_fn to keep each loop var's dtype and shape, but loop var {} is {} "
             "and body_fn returns {}",
             i, typed(vars[i]), typed(b[i]));
    std::vector<TensorMeta> metas = metas_of(vars);
    for (TensorMeta& m : metas) m.device = vars.empty() ? kCPU : vars[0].device();
    return metas;
  }

  Tensors decompose(const Tensors& in) const override {
    Tensors vars = slice(in, 0, n_);
    const Loc& loc = kernel_call_site();
    for (int64_t i = 0; i < max_; ++i) {
      if (run(*cond_, with_extra(vars, in, false), loc)[0].item() == 0) break;
      vars = run(*body_, with_extra(vars, in, true), loc);
    }
    return as_new_outputs(vars, in);
  }

  // Note [while_loop gradient]: backward recomputes the loop's iterates (the loop vars before
  // each step; memory: one copy of the loop vars per iteration), then walks the steps in reverse,
  // differentiating the body at each saved iterate and seeding it with the gradient of the step
  // after; the body's captured inputs (parameters) sum their gradient over the steps. The trip
  // count must be known, so this runs where the predicate is computed (an eager run of the
  // graph); a backward traced on stand-ins is an error naming the loop.
  Tensors vjp(const VjpContext& ctx) const override {
    if (Tracer::active() || std::any_of(ctx.inputs.begin(), ctx.inputs.end(),
                                        [](const Tensor& t) { return t.defined() && t.is_meta(); }))
      fail("while_loop", ctx.loc,
           "a while_loop's gradient cannot be traced (its trip count is known only when the loop "
           "runs); differentiate the graph in an eager run (kiln::grad or backward() on its "
           "outputs), or unroll the loop with a C++ loop of a fixed count");
    const Loc& loc = ctx.loc;
    const Tensors& in = ctx.inputs;
    std::vector<Tensors> iterates;  // the loop vars before each step
    {
      NoGradGuard no_grad;
      Tensors vars = slice(in, 0, n_);
      for (int64_t i = 0; i < max_; ++i) {
        if (run(*cond_, with_extra(vars, in, false), loc)[0].item() == 0) break;
        iterates.push_back(vars);
        vars = run(*body_, with_extra(vars, in, true), loc);
      }
    }
    const size_t first_body_extra = n_ + cond_extra();
    Tensors g_vars(n_), g_extra(body_extra());
    for (size_t j = 0; j < n_; ++j) g_vars[j] = ctx.grads[j];
    EnableGradGuard enable;
    for (size_t t = iterates.size(); t-- > 0;) {
      Tensors sub_in, leaves;
      std::vector<size_t> leaf_of;  // input index of each leaf: j < n_ a loop var, else an extra
      auto take = [&](const Tensor& x, size_t index, bool wanted) {
        Tensor v = x;
        if (wanted && is_floating(x.dtype())) {
          v = detach(x);
          v.set_requires_grad(true);
          leaves.push_back(v);
          leaf_of.push_back(index);
        }
        sub_in.push_back(v);
      };
      for (size_t j = 0; j < n_; ++j) take(iterates[t][j], j, true);
      for (size_t e = 0; e < body_extra(); ++e)
        take(in[first_body_extra + e], n_ + e, ctx.needs_grad[first_body_extra + e]);
      const Tensors ys = run(*body_, sub_in, loc);
      Tensors outs, seeds;
      for (size_t j = 0; j < n_; ++j)
        if (ys[j].requires_grad() && g_vars[j].defined())
          outs.push_back(ys[j]), seeds.push_back(g_vars[j]);
      Tensors found(leaves.size());
      if (!outs.empty() && !leaves.empty())
        found = kiln::grad(outs, leaves, seeds, false, ctx.create_graph, true, loc);
      Tensors next(n_);
      for (size_t l = 0; l < leaves.size(); ++l) {
        if (!found[l].defined()) continue;
        const size_t index = leaf_of[l];
        if (index < n_) {
          next[index] = found[l];
        } else {
          Tensor& acc = g_extra[index - n_];
          acc = acc.defined() ? add(acc, found[l]) : found[l];
        }
      }
      g_vars = std::move(next);
    }
    Tensors result(in.size());
    for (size_t j = 0; j < n_; ++j)
      if (ctx.needs_grad[j]) result[j] = g_vars[j];
    for (size_t e = 0; e < body_extra(); ++e)
      if (ctx.needs_grad[first_body_extra + e]) result[first_body_extra + e] = g_extra[e];
    return result;
  }

 private:
  std::shared_ptr<const Graph> cond_, body_;
  size_t n_;
  int64_t max_;
};

std::shared_ptr<const Graph> subgraph(const Attrs& a, const char* key) {
  if (!a.has(key)) a.fail(key, "is missing");
  try {
    return std::make_shared<const Graph>(from_json(a.json().at(key), {}));
  } catch (const Error& e) {
    a.fail(key, std::string("is not a valid subgraph: ") + e.what());
  }
}

KILN_REGISTER_OP("cond", (OpSchema{{"pred", "operands..."}, {"outputs..."}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const CondOp>(subgraph(a, "then"), subgraph(a, "else"),
                                                         a.i("operands"));
                 });
KILN_REGISTER_OP("while_loop",
                 (OpSchema{{"loop_vars..."}, {"loop_vars..."}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const WhileOp>(subgraph(a, "cond"), subgraph(a, "body"),
                                                          a.i("loop_vars"), a.i("max_iterations"));
                 });

}  // namespace

std::vector<std::shared_ptr<const Graph>> detail::subgraphs_of(const Op& op) {
  if (const auto* c = dynamic_cast<const CondOp*>(&op)) return c->subgraphs();
  if (const auto* w = dynamic_cast<const WhileOp*>(&op)) return w->subgraphs();
  return {};
}

OpPtr detail::make_cond_op(std::shared_ptr<const Graph> then_g, std::shared_ptr<const Graph> else_g,
                           int64_t operands) {
  return std::make_shared<const CondOp>(std::move(then_g), std::move(else_g), operands);
}

OpPtr detail::make_while_op(std::shared_ptr<const Graph> cond_g,
                            std::shared_ptr<const Graph> body_g, int64_t loop_vars,
                            int64_t max_iterations) {
  return std::make_shared<const WhileOp>(std::move(cond_g), std::move(body_g), loop_vars,
                                         max_iterations);
}

std::vector<Tensor> detail::lift_captures(Graph& g) {
  std::vector<Tensor> lifted;
  for (const Capture& c : g.captures) {
    g.inputs.push_back(c.value);
    Value& v = g.values[static_cast<size_t>(c.value)];
    if (v.name.empty()) v.name = fmt::format("captured{}", lifted.size());
    lifted.push_back(c.tensor);
  }
  g.captures.clear();
  return lifted;
}

void detail::erase_sizes(Graph& g) {
  std::vector<bool> is_input(g.values.size(), false);
  for (int id : g.inputs) is_input[static_cast<size_t>(id)] = true;
  for (Value& v : g.values)
    for (size_t d = 0; d < v.shape.size(); ++d)
      v.shape[d] = Dim{0, is_input[static_cast<size_t>(v.id)] ? fmt::format("%{}.{}", v.id, d)
                                                              : std::string("?")};
}

}  // namespace kiln::graph
