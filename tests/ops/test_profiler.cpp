#include "kiln/ops/profiler.h"

#include <gtest/gtest.h>

#include "kiln/autograd/engine.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"

namespace kiln {
namespace {

const OpProfile* find(const std::vector<OpProfile>& ops, const std::string& name) {
  for (const auto& p : ops)
    if (p.name == name) return &p;
  return nullptr;
}

TEST(Profiler, CountsCallsPerOp) {
  Tensor a = ones({4, 4}), b = ones({4, 4});
  Profiler profiler;
  for (int i = 0; i < 3; ++i) a = add(a, b);
  Tensor s = sum(a);
  const auto ops = profiler.key_averages();
  ASSERT_NE(find(ops, "add"), nullptr);
  EXPECT_EQ(find(ops, "add")->calls, 3);
  ASSERT_NE(find(ops, "sum"), nullptr);
  EXPECT_EQ(find(ops, "sum")->calls, 1);
  for (const auto& p : ops) {
    EXPECT_GE(p.self_ms, 0.0) << p.name;
    EXPECT_GE(p.total_ms + 1e-9, p.self_ms) << p.name;
  }
}

TEST(Profiler, CountsMatmulAndConvFlops) {
  Tensor a = ones({8, 16}), b = ones({16, 32});
  Tensor x = ones({2, 3, 10, 10}).set_requires_grad(true);
  Tensor w = ones({4, 3, 3, 3}).set_requires_grad(true);
  Profiler profiler;
  matmul(a, b);
  Tensor y = conv2d(x, w, Tensor(), Conv2dOptions{});
  sum(y).backward();
  profiler.stop();
  const auto ops = profiler.key_averages();
  ASSERT_NE(find(ops, "matmul"), nullptr);  // one op: its bmm is inside it
  EXPECT_DOUBLE_EQ(find(ops, "matmul")->flops, 2.0 * 8 * 16 * 32);
  const double conv = 2.0 * (2 * 4 * 8 * 8) * (3 * 3 * 3);  // outputs x MACs per output
  ASSERT_NE(find(ops, "conv2d"), nullptr);
  EXPECT_DOUBLE_EQ(find(ops, "conv2d")->flops, conv);
  ASSERT_NE(find(ops, "conv2d_backward_input"), nullptr);
  EXPECT_DOUBLE_EQ(find(ops, "conv2d_backward_input")->flops, conv);
  ASSERT_NE(find(ops, "conv2d_backward_weight"), nullptr);
  EXPECT_DOUBLE_EQ(find(ops, "conv2d_backward_weight")->flops, conv);
}

TEST(Profiler, StopsCollectingAndResets) {
  Tensor a = ones({2});
  Profiler profiler;
  add(a, a);
  profiler.stop();
  add(a, a);
  EXPECT_EQ(find(profiler.key_averages(), "add")->calls, 1);
  profiler.reset();
  EXPECT_TRUE(profiler.key_averages().empty());
}

TEST(Profiler, IgnoresMetaTensorsAndOtherSessionsAreIndependent) {
  Tensor m = empty({2, 2}, {DType::Float32, kMeta});
  Profiler outer;
  add(m, m);
  EXPECT_EQ(find(outer.key_averages(), "add"), nullptr);
  {
    Profiler inner;
    add(ones({2}), ones({2}));
    EXPECT_EQ(find(inner.key_averages(), "add")->calls, 1);
  }
  add(ones({2}), ones({2}));
  EXPECT_EQ(find(outer.key_averages(), "add")->calls, 2);
}

TEST(Profiler, TableListsOpsWithSharesAndTotals) {
  Profiler profiler;
  matmul(ones({64, 64}), ones({64, 64}));
  add(ones({3}), ones({3}));
  const std::string table = profiler.table();
  EXPECT_NE(table.find("op"), std::string::npos);
  EXPECT_NE(table.find("GFLOP/s"), std::string::npos);
  EXPECT_NE(table.find("matmul"), std::string::npos);
  EXPECT_NE(table.find("add"), std::string::npos);
  EXPECT_NE(table.find("total"), std::string::npos);
  EXPECT_NE(profiler.table(1).find("more ops"), std::string::npos);
}

}  // namespace
}  // namespace kiln
