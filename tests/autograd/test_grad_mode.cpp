// Grad mode guards (kiln/core/grad_mode.h): scoped, nestable, thread-local.
#include "kiln/core/grad_mode.h"

#include <gtest/gtest.h>

#include "tests/support/test_util.h"

#include <stdexcept>
#include <thread>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/node.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

using test::leaf;

TEST(GradMode, EnabledByDefaultAndGuardsNest) {
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(GradMode::is_enabled());
    {
      EnableGradGuard enable;
      EXPECT_TRUE(GradMode::is_enabled());
      {
        NoGradGuard inner;
        EXPECT_FALSE(GradMode::is_enabled());
      }
      EXPECT_TRUE(GradMode::is_enabled());
    }
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(GradMode, GuardRestoresOnException) {
  try {
    NoGradGuard no_grad;
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(GradMode, OutputsUnderNoGradDoNotRequireGrad) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y, v, c;
  {
    NoGradGuard no_grad;
    y = exp(mul(x, 2.0));
    v = x.reshape({2, 1});
    c = clone(x);
  }
  for (const Tensor& t : {y, v, c}) {
    EXPECT_FALSE(t.requires_grad());
    EXPECT_TRUE(t.is_leaf());
    EXPECT_TRUE(t.grad_fn() == nullptr);
  }
  // The inputs keep requiring grad, and the same ops record again once the guard is gone.
  EXPECT_TRUE(x.requires_grad());
  Tensor z = exp(mul(x, 2.0));
  EXPECT_TRUE(z.requires_grad());
  EXPECT_EQ(z.grad_fn()->name(), "exp");
}

TEST(GradMode, EnableGradInsideNoGradRecords) {
  Tensor x = leaf({3.0});
  Tensor y, loss;
  {
    NoGradGuard no_grad;
    {
      EnableGradGuard enable;
      y = mul(x, x);
      loss = sum(y);
    }
    EXPECT_TRUE(y.requires_grad());
    EXPECT_FALSE(sum(y).requires_grad());  // back under NoGradGuard
    // backward itself works under NoGradGuard (the engine decides grad mode while it runs).
    loss.backward();
  }
  EXPECT_DOUBLE_EQ(x.grad().item(), 6.0);
}

TEST(GradMode, IsThreadLocal) {
  NoGradGuard no_grad;
  DetectAnomalyGuard anomaly;
  bool seen_grad = false, seen_anomaly = true, recorded = false;
  double grad_in_thread = 0.0;
  std::thread worker([&] {
    seen_grad = GradMode::is_enabled();
    seen_anomaly = AnomalyMode::is_enabled();
    Tensor x = leaf({2.0});
    Tensor y = mul(x, x);
    recorded = y.requires_grad();
    sum(y).backward();
    grad_in_thread = x.grad().item();
    NoGradGuard inner;  // toggling in the thread does not leak to the main thread
  });
  worker.join();
  EXPECT_TRUE(seen_grad);
  EXPECT_FALSE(seen_anomaly);
  EXPECT_TRUE(recorded);
  EXPECT_DOUBLE_EQ(grad_in_thread, 4.0);
  EXPECT_FALSE(GradMode::is_enabled());
  EXPECT_TRUE(AnomalyMode::is_enabled());
  // A thread that disables grad mode does not affect the main thread either.
  std::thread([] { GradMode::set_enabled(false); }).join();
  {
    EnableGradGuard enable;
    EXPECT_TRUE(GradMode::is_enabled());
  }
}

TEST(GradMode, BackwardRestoresGradMode) {
  Tensor x = leaf({1.0});
  sum(mul(x, x)).backward();
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard no_grad;
    EnableGradGuard enable;
    Tensor y = mul(x, x);
    sum(y).backward({}, false, /*create_graph=*/true);
    EXPECT_TRUE(GradMode::is_enabled());
  }
  {
    NoGradGuard no_grad;
    Tensor y;
    {
      EnableGradGuard enable;
      y = sum(mul(x, x));
    }
    y.backward({}, false, true);
    EXPECT_FALSE(GradMode::is_enabled());
  }
  // x.grad = 2x with history that saved x: a reference cycle (as in PyTorch), broken here.
  x.set_grad(Tensor());
}

TEST(GradMode, GradModeDuringBackwardFollowsCreateGraph) {
  // A hook observes the mode the engine runs gradients in.
  Tensor x = leaf({1.0});
  std::vector<bool> modes;
  x.register_hook([&](const Tensor&) {
    modes.push_back(GradMode::is_enabled());
    return Tensor();
  });
  sum(mul(x, 2.0)).backward();
  sum(mul(x, 2.0)).backward({}, false, true);
  {
    NoGradGuard no_grad;
    Tensor y;
    {
      EnableGradGuard enable;
      y = sum(mul(x, 2.0));
    }
    y.backward({}, false, true);
  }
  EXPECT_EQ(modes, (std::vector<bool>{false, true, true}));
}

}  // namespace
}  // namespace kiln
