// A compiled training step serves every batch size from one trace (Note [size-free backward] in
// kiln/ops/op.h): with each of the common losses, batches of 1, 7, 64 and 256 run the graph
// traced for the first, and every step equals eager training bit for bit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/models.h"
#include "tests/support/test_util.h"

namespace kiln::train {
namespace {

struct LossCase {
  std::string name;
  bool class_targets;
  StepLossFn fn;
};

std::vector<LossCase> loss_cases() {
  return {
      {"mse", false, [](const Tensor& y, const Tensor& t) { return mse_loss(y, t); }},
      {"l1", false, [](const Tensor& y, const Tensor& t) { return l1_loss(y, t); }},
      {"huber", false, [](const Tensor& y, const Tensor& t) { return huber_loss(y, t); }},
      {"bce_with_logits", false,
       [](const Tensor& y, const Tensor& t) { return binary_cross_entropy_with_logits(y, t); }},
      {"bce", false,
       [](const Tensor& y, const Tensor& t) { return binary_cross_entropy(sigmoid(y), t); }},
      {"cross_entropy", true, [](const Tensor& y, const Tensor& t) { return cross_entropy(y, t); }},
  };
}

void expect_same_state(const nn::Module& a, const nn::Module& b, const std::string& what) {
  const nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    SCOPED_TRACE(what + ", " + sa[i].first);
    test::expect_bit_identical(sa[i].second, sb[i].second);
  }
}

class BatchSizes : public ::testing::TestWithParam<DType> {};

TEST_P(BatchSizes, OneTraceServesEveryBatchAsEagerDoes) {
  const DType dtype = GetParam();
  for (const LossCase& c : loss_cases()) {
    SCOPED_TRACE(c.name);
    manual_seed(5);
    auto eager = nn::mlp(12, {16}, 4);
    manual_seed(5);
    auto compiled = nn::mlp(12, {16}, 4);
    eager->to(dtype);
    compiled->to(dtype);
    optim::SGD opt_e(eager->parameters(), {.lr = 0.05, .momentum = 0.9});
    optim::SGD opt_c(compiled->parameters(), {.lr = 0.05, .momentum = 0.9});
    CompiledStep step =
        compile_train_step(*compiled, c.fn, opt_c, {.logger = [](const std::string&) {}});
    for (int64_t batch : {1, 7, 64, 256}) {
      Tensor x = to_dtype(randn({batch, 12}), dtype);
      Tensor t = c.class_targets ? randint(0, 4, {batch}) : to_dtype(rand({batch, 4}), dtype);
      opt_e.zero_grad();
      Tensor loss = c.fn((*eager)(x), t);
      loss.backward();
      opt_e.step();
      const CompiledStep::Result r = step(x, t);
      const std::string at = "batch " + std::to_string(batch);
      SCOPED_TRACE(at);
      test::expect_bit_identical(r.loss, loss);
      expect_same_state(*compiled, *eager, at);
    }
    EXPECT_EQ(step.function()->stats().traces, 1)
        << c.name << ": a size baked into the backward would trace once per batch size";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BatchSizes, ::testing::Values(DType::Float32, DType::Float64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// kiln::grad traced with a symbolic batch: the gradients of sum, mean and the losses are sized
// from each call's batch.
TEST(TracedGrad, ReductionsAndLossesServeEveryBatch) {
  Tensor w = randn({5, 3}).set_requires_grad(true);
  auto program = [&](const Tensor& x) {
    Tensor y = matmul(x, w);
    Tensor l = add(add(sum(y), mean(y)), add(mse_loss(y, zeros_like(y)), var(y)));
    l = add(l, mean(sum(y, {1})));
    return kiln::grad({l}, {w})[0];
  };
  graph::Function f = graph::function(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{program(in[0])}; },
      {graph::TensorSpec({"batch", 5}, DType::Float32, "x")}, {.name = "g"});
  for (int64_t batch : {1, 3, 40}) {
    Tensor x = randn({batch, 5});
    SCOPED_TRACE("batch " + std::to_string(batch));
    test::expect_bit_identical(f({x})[0], program(x));
  }
  EXPECT_EQ(f.stats().traces, 1);
}

}  // namespace
}  // namespace kiln::train
