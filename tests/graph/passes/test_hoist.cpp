// Hoisting writes (Note [hoisting writes]).
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

// Two "parameters" written at the end, as an optimizer step writes them: both writes need only
// g, made first, but b is read by the matmul that makes p.
struct TwoUpdates {
  Tensor a = randn({32, 32}), b = randn({32, 32});
  Graph trace() {
    return raw_trace(
        [this](const Tensors& in) {
          Tensor g = exp(in[0]);
          Tensor p = matmul(in[0], b);
          Tensor t = matmul(p, p);
          a.copy_(g);
          b.copy_(g);
          return Tensors{t};
        },
        {TensorSpec({32, 32})});
  }
};

TEST(Hoist, AnUpdateRunsRightAfterWhatItNeeds) {
  TwoUpdates w;
  const Graph before = w.trace();
  Graph after = before;
  ASSERT_TRUE(passes::hoist_writes(after)) << to_text(after);
  after.validate();
  // a's write (with the expand copy_ reads its source through) moved up to just after exp, b's
  // to just after the matmul that reads b.
  const std::vector<std::string> order = {"exp",    "expand", "copy_", "matmul",
                                          "expand", "copy_",  "matmul"};
  ASSERT_EQ(after.nodes.size(), order.size()) << both(before, after);
  for (size_t i = 0; i < order.size(); ++i)
    EXPECT_EQ(after.nodes[i].op->name(), order[i]) << both(before, after);
  EXPECT_EQ(after.nodes[2].inputs[0], before.nodes[4].inputs[0]);  // a
  EXPECT_EQ(after.nodes[5].inputs[0], before.nodes[6].inputs[0]);  // b
  // The same outputs and the same final parameters as the graph as traced.
  const Tensor a0 = w.a.clone(), b0 = w.b.clone(), x = randn({32, 32});
  const Tensors out_before = run(before, {x});
  const Tensor a1 = w.a.clone(), b1 = w.b.clone();
  w.a.copy_(a0);
  w.b.copy_(b0);
  const Tensors out_after = run(after, {x});
  kiln::test::expect_bit_identical(out_after[0], out_before[0]);
  kiln::test::expect_bit_identical(w.a, a1);
  kiln::test::expect_bit_identical(w.b, b1);
}

TEST(Hoist, AWriteNeverPassesAReadOfItsMemoryNorAWriteOfWhatItReads) {
  Tensor c = zeros({8}), d = zeros({8});
  const Graph before = raw_trace(
      [&](const Tensors& in) {
        Tensor early = in[0] * 2.0;
        Tensor seen = c * 3.0;  // reads c: c's update may not run before it
        c.copy_(in[0]);
        d.add_(c);  // reads c after its write
        return Tensors{early, seen};
      },
      {TensorSpec({8})});
  Graph after = before;
  passes::hoist_writes(after);
  EXPECT_EQ(to_text(after), to_text(before));
  const Tensor x = randn({8});
  const Tensors out = run(after, {x});
  kiln::test::expect_bit_identical(out[1], zeros({8}));
  kiln::test::expect_bit_identical(d, x);
}

TEST(Hoist, NothingMovesPastARandomDraw) {
  Tensor a = zeros({8});
  Graph g = raw_trace(
      [&](const Tensors& in) {
        Tensor g = exp(in[0]);
        Tensor noise = randn_like(in[0]);
        a.copy_(g);
        return Tensors{noise};
      },
      {TensorSpec({8})});
  const std::string text = to_text(g);
  EXPECT_FALSE(passes::hoist_writes(g)) << to_text(g);
  EXPECT_EQ(to_text(g), text);
}

}  // namespace
}  // namespace kiln::graph
