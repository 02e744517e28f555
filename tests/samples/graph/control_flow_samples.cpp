// Registry samples of the control-flow ops "cond" and "while_loop" (kiln/graph/
// control_flow_ops.cpp, Note [op registry]). Eager kiln::cond runs a branch without the op, so
// each sample builds the op from traced branches, as a traced function does, and dispatches it.
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/graph/control_flow_ops.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Tensors = std::vector<Tensor>;

// cond(a0, then: a1 * a2, else: a1 + a2): both branches accept what the other does (a traced
// cond checks both, PyTorch's expression runs one).
Tensors run_cond(const Tensors& in) {
  Tensors operands{in[1], in[2]}, then_extra, else_extra;
  auto then_g = graph::detail::trace_branch(
      "then", [](const Tensors& x) { return Tensors{mul(x[0], x[1])}; }, operands, then_extra,
      Loc::current());
  auto else_g = graph::detail::trace_branch(
      "else", [](const Tensors& x) { return Tensors{add(x[0], x[1])}; }, operands, else_extra,
      Loc::current());
  return dispatch(graph::detail::make_cond_op(then_g, else_g, 2), in, Loc::current());
}

// while (i < 3) { x = x * 0.5 + 1; i = i + 1; } over (x, i), at most 10 times.
Tensors run_while(const Tensors& in) {
  Tensors cond_extra, body_extra;
  auto cond_g = graph::detail::trace_branch(
      "cond", [](const Tensors& v) { return Tensors{lt(v[1], 3.0)}; }, in, cond_extra,
      Loc::current());
  auto body_g = graph::detail::trace_branch(
      "body",
      [](const Tensors& v) {
        return Tensors{add(mul(v[0], 0.5), 1.0), add(v[1], 1.0)};
      },
      in, body_extra, Loc::current());
  // A traced loop has no gradient (its backward is an error, tests/graph/test_control_flow.cpp):
  // the registry's backward passes would raise it.
  NoGradGuard no_grad;
  return dispatch(graph::detail::make_while_op(cond_g, body_g, 2, 10), in, Loc::current());
}

KILN_REGISTER_OP_SAMPLES("cond", [] {
  auto pred = [](bool v) { return full({}, v ? 1.0 : 0.0, {DType::Bool}); };
  return std::vector<OpSample>{
      {"then",
       {pred(true), sample_tensor({2, 3}, 371), sample_tensor({2, 3}, 372)},
       run_cond,
       "a1 * a2 if bool(a0) else a1 + a2"},
      {"else_broadcast",
       {pred(false), sample_tensor({2, 3}, 373), sample_tensor({3}, 374)},
       run_cond,
       "a1 * a2 if bool(a0) else a1 + a2"},
  };
});

KILN_REGISTER_OP_SAMPLES("while_loop", [] {
  auto counter = [](double v) { return full({}, v, {DType::Int64}); };
  // No PyTorch expression: the fuzzer would feed the counter other values.
  return std::vector<OpSample>{
      {"three_steps", {sample_tensor({4}, 375), counter(0)}, run_while, "", {}, false},
      {"no_step", {sample_tensor({2, 2}, 376), counter(5)}, run_while, "", {}, false},
  };
});

}  // namespace

}  // namespace kiln
