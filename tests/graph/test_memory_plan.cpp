// The memory planner (Note [memory planner]): the placement itself on made-up lifetimes, and
// planned runs of real graphs, which must compute exactly what unplanned runs compute.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "kiln/graph/executor.h"
#include "kiln/graph/function.h"
#include "kiln/graph/memory_plan.h"
#include "kiln/kiln.h"
#include "kiln/nn/traced.h"
#include "tests/support/test_util.h"

namespace kiln::graph {
namespace {

using Tensors = std::vector<Tensor>;

AllocationRecord rec(size_t nbytes, int64_t start, int64_t end, int overwrites = -1) {
  return {0, nbytes, start, end, overwrites};
}

// Every two planned allocations alive at the same time hold disjoint bytes, unless one was
// computed into the other.
void expect_sound(const std::vector<AllocationRecord>& r, const MemoryPlan& p) {
  auto size = [&](size_t i) {
    return static_cast<int64_t>((r[i].nbytes + kArenaAlignment - 1) / kArenaAlignment *
                                kArenaAlignment);
  };
  for (size_t i = 0; i < r.size(); ++i) {
    if (p.offsets[i] < 0) continue;
    EXPECT_EQ(p.offsets[i] % static_cast<int64_t>(kArenaAlignment), 0);
    EXPECT_LE(static_cast<size_t>(p.offsets[i] + size(i)), p.arena_bytes);
    for (size_t j = 0; j < i; ++j) {
      if (p.offsets[j] < 0) continue;
      const bool in_time = r[i].start < r[j].end && r[j].start < r[i].end;
      const bool in_memory =
          p.offsets[i] < p.offsets[j] + size(j) && p.offsets[j] < p.offsets[i] + size(i);
      const bool pair =
          p.overwrites[i] == static_cast<int>(j) || p.overwrites[j] == static_cast<int>(i);
      EXPECT_FALSE(in_time && in_memory && !pair) << "allocations " << j << " and " << i;
    }
  }
}

TEST(MemoryPlan, AChainReusesTwoBlocks) {
  // a -> b -> c -> d, each alive until the next one's successor is made.
  const std::vector<AllocationRecord> r = {rec(1024, 0, 2), rec(1024, 1, 4), rec(1024, 3, 6),
                                           rec(1024, 5, 7)};
  const MemoryPlan p = plan_memory(r);
  expect_sound(r, p);
  EXPECT_EQ(p.arena_bytes, 2048u);
  EXPECT_EQ(p.live_peak_bytes, 2048u);
  EXPECT_EQ(p.planned_bytes, 4096u);
  EXPECT_EQ(p.planned, 4);
}

TEST(MemoryPlan, WhatOutlivesTheRunStaysWithTheAllocator) {
  const std::vector<AllocationRecord> r = {rec(100, 0, 1), rec(4096, 2, -1), rec(100, 3, 4)};
  const MemoryPlan p = plan_memory(r);
  EXPECT_GE(p.offsets[0], 0);
  EXPECT_EQ(p.offsets[1], -1);
  EXPECT_EQ(p.unplanned_bytes, 4096u);
  EXPECT_EQ(p.arena_bytes, 128u);  // the two small ones share one aligned block
}

TEST(MemoryPlan, AnInPlacePairSharesBytesAndAChainOfThemOneBlock) {
  // b computed into a, c into b: one block for all three, though each pair overlaps in time.
  const std::vector<AllocationRecord> r = {rec(4096, 0, 2), rec(4096, 1, 4, 0), rec(4096, 3, 6, 1),
                                           rec(4096, 5, 7)};
  const MemoryPlan p = plan_memory(r);
  expect_sound(r, p);
  EXPECT_EQ(p.in_place, 2);
  EXPECT_EQ(p.offsets[0], p.offsets[1]);
  EXPECT_EQ(p.offsets[1], p.offsets[2]);
  EXPECT_EQ(p.arena_bytes, 8192u);
}

TEST(MemoryPlan, AnInPlaceClaimThatDoesNotFitIsIgnored) {
  // A partner of another size, one that died before the output was made, a second claim on one
  // partner: none shares bytes.
  const std::vector<AllocationRecord> r = {rec(4096, 0, 3), rec(8192, 1, 5, 0), rec(4096, 2, 6, 0),
                                           rec(4096, 4, 8, 0)};
  const MemoryPlan p = plan_memory(r);
  expect_sound(r, p);
  EXPECT_EQ(p.in_place, 1);
  EXPECT_EQ(p.overwrites[2], 0);
  EXPECT_EQ(p.overwrites[1], -1);
  EXPECT_EQ(p.overwrites[3], -1);
}

TEST(MemoryPlan, RandomLifetimesArePackedSoundlyAndNearTheLowerBound) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<AllocationRecord> r;
    int64_t clock = 0;
    std::vector<size_t> live;
    std::vector<std::pair<size_t, int64_t>> pending;
    for (int i = 0; i < 200; ++i) {
      r.push_back(rec(64 * (1 + gen() % 64), clock++, -1));
      live.push_back(r.size() - 1);
      while (live.size() > 1 + gen() % 12) {
        const size_t k = gen() % live.size();
        r[live[k]].end = clock++;
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    for (size_t k : live)
      if (gen() % 2) r[k].end = clock++;
    const MemoryPlan p = plan_memory(r);
    expect_sound(r, p);
    EXPECT_GE(p.arena_bytes, p.live_peak_bytes);
    EXPECT_LE(p.arena_bytes, p.live_peak_bytes * 2) << "trial " << trial;
  }
}

// A graph of a few elementwise steps and matmuls, traced with a symbolic batch.
Function mlp_function(bool plan, const Tensor& w1, const Tensor& w2) {
  return function(
      [&, w1, w2](const Tensors& in) {
        Tensor h = relu(add(matmul(in[0], w1), 0.5));
        Tensor y = mul(sigmoid(matmul(h, w2)), 2.0);
        return Tensors{sub(y, 1.0), sum(h)};
      },
      {TensorSpec({"batch", 64})}, {.name = "mlp", .plan_memory = plan});
}

TEST(MemoryPlanner, PlannedRunsComputeExactlyWhatUnplannedRunsDo) {
  Tensor w1 = randn({64, 256}), w2 = randn({256, 32});
  Function planned = mlp_function(true, w1, w2);
  Function plain = mlp_function(false, w1, w2);
  for (int64_t batch : {16, 16, 16, 3, 16, 3, 3}) {
    Tensor x = randn({batch, 64});
    const Tensors a = planned({x}), b = plain({x});
    for (size_t i = 0; i < a.size(); ++i) test::expect_bit_identical(a[i], b[i]);
  }
  const MemoryPlannerStats s = planned.memory_stats()[0];
  EXPECT_EQ(s.shapes, 2);
  EXPECT_EQ(s.recordings, 2);
  EXPECT_EQ(s.replays, 5);
  EXPECT_EQ(s.diverged, 0);
  EXPECT_EQ(s.kept_arenas, 0);
  EXPECT_GT(s.arena_allocations, 0);
  EXPECT_EQ(s.arenas, 2);  // one per shape: calls in turn reuse it
  ASSERT_TRUE(s.last_plan.has_value());
  EXPECT_GT(s.last_plan->in_place, 0) << "relu, mul and sub can compute into their inputs";
  EXPECT_LT(s.last_plan->arena_bytes, s.last_plan->planned_bytes);
  EXPECT_EQ(plain.memory_stats()[0].recordings, 0);
}

TEST(MemoryPlanner, OutputsNeverLiveInTheArena) {
  Tensor w1 = randn({64, 256}), w2 = randn({256, 32});
  Function f = mlp_function(true, w1, w2);
  Tensor x = randn({8, 64});
  f({x});
  const Tensors first = f({x});  // replayed
  const Tensor kept = first[0].clone();
  for (int i = 0; i < 3; ++i) f({randn({8, 64})});
  test::expect_bit_identical(first[0], kept);
  EXPECT_EQ(f.memory_stats()[0].replays, 4);
}

TEST(MemoryPlanner, ConcurrentCallsGetTheirOwnArenas) {
  Tensor w1 = randn({64, 256}), w2 = randn({256, 32});
  Function planned = mlp_function(true, w1, w2);
  Function plain = mlp_function(false, w1, w2);
  std::vector<Tensor> xs;
  for (int t = 0; t < 4; ++t) xs.push_back(randn({32, 64}));
  planned({xs[0]});  // recorded
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const Tensor want = plain({xs[static_cast<size_t>(t)]})[0];
      for (int i = 0; i < 20; ++i)
        if (max(abs(sub(planned({xs[static_cast<size_t>(t)]})[0], want))).item() != 0.0)
          ++wrong[static_cast<size_t>(t)];
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[static_cast<size_t>(t)], 0) << "thread " << t;
  const MemoryPlannerStats s = planned.memory_stats()[0];
  EXPECT_EQ(s.replays, 80);
  EXPECT_GE(s.arenas, 1);
  EXPECT_LE(s.arenas, 4);
}

TEST(MemoryPlanner, AGraphWhoseAllocationsChangeFromCallToCallFallsBackAndStaysExact) {
  // The loop's trip count depends on the data, so the allocations do too.
  auto body = [](const Tensors& in) {
    Tensors out = kiln::while_loop(
        [](const Tensors& v) { return Tensors{lt(sum(v[0]), 100.0)}; },
        [](const Tensors& v) { return Tensors{add(mul(v[0], 2.0), 1.0)}; }, {relu(in[0])}, 50);
    return Tensors{neg(out[0])};
  };
  Function planned = function(body, {TensorSpec({4})}, {.name = "loop"});
  for (double start : {0.0, 1.0, 5.0, 0.5, 20.0, 0.0, 3.0}) {
    Tensor x = full({4}, start);
    test::expect_bit_identical(planned({x})[0], body({x})[0]);
  }
  const MemoryPlannerStats s = planned.memory_stats()[0];
  EXPECT_EQ(s.recordings + s.replays, 7);
}

TEST(MemoryPlanner, TapedCallsKeepWhatTheTapeSavesAndGradientsMatch) {
  Tensor w1 = randn({64, 256}), w2 = randn({256, 32});
  w1.set_requires_grad(true);
  w2.set_requires_grad(true);
  Function planned = mlp_function(true, w1, w2);
  Function plain = mlp_function(false, w1, w2);
  Tensor x = randn({8, 64});
  for (int i = 0; i < 3; ++i) {
    Tensors a = planned({x});
    add(sum(a[0]), a[1]).backward();
    const Tensor g1 = w1.grad().clone(), g2 = w2.grad().clone();
    w1.set_grad(Tensor()), w2.set_grad(Tensor());
    Tensors b = plain({x});
    add(sum(b[0]), b[1]).backward();
    test::expect_bit_identical(g1, w1.grad());
    test::expect_bit_identical(g2, w2.grad());
    w1.set_grad(Tensor()), w2.set_grad(Tensor());
  }
  const MemoryPlannerStats s = planned.memory_stats()[0];
  EXPECT_EQ(s.diverged, 0);
  EXPECT_EQ(s.kept_arenas, 0);
}

TEST(MemoryPlanner, ASmallCnnInEvalModeIsExactAndUsesLessThanItsIntermediates) {
  manual_seed(3);
  auto model = nn::small_cnn(1, 10);
  model->eval();
  NoGradGuard no_grad;
  graph::Function planned =
      nn::function(model, {TensorSpec({"batch", 1, 28, 28})}, {.plan_memory = true});
  graph::Function plain =
      nn::function(model, {TensorSpec({"batch", 1, 28, 28})}, {.plan_memory = false});
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({4, 1, 28, 28});
    test::expect_bit_identical(planned({x})[0], plain({x})[0]);
  }
  const MemoryPlannerStats s = planned.memory_stats()[0];
  EXPECT_EQ(s.diverged, 0);
  ASSERT_TRUE(s.last_plan.has_value());
  EXPECT_LT(s.last_plan->arena_bytes, s.last_plan->planned_bytes);
}

}  // namespace
}  // namespace kiln::graph
