// What the tape keeps alive: batch_norm does not save its output and relu saves only its
// output, so conv -> batch_norm -> relu keeps two activations per block, not three.
#include <gtest/gtest.h>

#include "kiln/autograd/engine.h"
#include "kiln/core/allocator.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

TEST(SavedMemory, BatchNormThenReluKeepsInputAndOutputOnly) {
  manual_seed(0);
  const Shape shape{8, 16, 32, 32};
  const int64_t act = shape_numel(shape) * 4;  // one float32 activation
  Tensor x = randn(shape);
  Tensor w = ones({16}), b = zeros({16});
  w.set_requires_grad(true);
  const int64_t before = memory_stats().allocated_bytes;
  Tensor y = relu(batch_norm(x, Tensor(), Tensor(), w, b, true));
  // y (saved by relu, held here) and nothing else of activation size: x is the caller's, and the
  // normalized tensor between batch_norm and relu is gone.
  const int64_t held = memory_stats().allocated_bytes - before;
  EXPECT_GE(held, act);
  EXPECT_LT(held, act + act / 2) << "bytes held by the graph: " << held;
  sum(y).backward();
  EXPECT_TRUE(w.grad().defined());
}

}  // namespace
}  // namespace kiln
