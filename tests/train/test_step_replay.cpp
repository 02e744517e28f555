// Note [effects]: a whole training step of the small CNN (forward with dropout, backward, batch
// norm's running statistics, the Adam update) is visible as op calls. Replaying the recorded
// stream, each op rebuilt from (name, attrs), on copies of the state reproduces the step bit for
// bit; and every tensor an op reads is either state or the output of an earlier op.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "kiln/kiln.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "tests/support/op_recorder.h"

namespace kiln {
namespace {

struct Step {
  std::shared_ptr<nn::Module> model = nn::small_cnn(1, 10, 12);
  optim::Adam adam{model->parameters(), {.lr = 1e-2}};
  Generator gen{7};
  Tensor x = randn({4, 1, 12, 12}, {DType::Float32}, &gen);
  Tensor y = tensor(std::vector<int64_t>{1, 3, 3, 9});

  Tensor run() {
    adam.zero_grad();
    Tensor logits = dropout((*model)(x), 0.25, true, &gen);
    Tensor loss = cross_entropy(logits, y);
    loss.backward();
    adam.step();
    return loss;
  }

  // Everything the step may read without an op having made it.
  std::vector<Tensor> state() const {
    std::vector<Tensor> s = model->parameters();
    for (const Tensor& b : model->buffers()) s.push_back(b);
    for (size_t i = 0; i < model->parameters().size(); ++i)
      for (const auto& [name, t] : adam.state(0, i).tensors) s.push_back(t);
    s.push_back(x);
    s.push_back(y);
    return s;
  }
};

bool bit_identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.numel() * itemsize(a.dtype())) == 0;
}

TEST(StepReplay, ATrainingStepIsEntirelyOpCallsAndReplaysBitForBit) {
  Step step;
  step.run();  // the optimizer state exists from here on
  const std::vector<Tensor> before = step.state();
  // The replay's copies of the state, keyed by the original tensors' storage.
  std::map<const Storage*, Tensor> replayed;
  std::vector<Tensor> snapshot;
  {
    NoGradGuard no_grad;
    for (const Tensor& t : before) {
      ASSERT_TRUE(t.is_contiguous() && t.storage_offset() == 0) << t.describe();
      snapshot.push_back(t.detach().clone());
      replayed[t.storage().get()] = t.detach().clone();
    }
  }
  std::vector<test::RecordedCall> calls;
  Tensor loss;
  {
    test::RecordOps record;
    loss = step.run();
    calls = record.calls();
  }
  ASSERT_GT(calls.size(), 50u);

  // A tensor of the recorded run in the replay: the same storage seen through the same geometry
  // (a detach() or a .grad handle is a new handle on memory an op made).
  auto lookup = [&](const Tensor& t, const std::string& what) -> Tensor {
    auto it = replayed.find(t.storage().get());
    if (it == replayed.end()) {
      ADD_FAILURE() << what << " reads " << t.describe()
                    << ", which is neither state nor the output of an earlier op";
      return t;
    }
    return make_view(it->second, t.shape(), t.strides(), t.storage_offset());
  };
  std::set<std::string> names;
  for (const test::RecordedCall& call : calls) {
    const std::string what = std::string(call.op->name()) + " " + call.op->attrs().dump();
    names.insert(call.op->name());
    std::vector<Tensor> inputs;
    for (const Tensor& t : call.inputs) inputs.push_back(lookup(t, what));
    OpPtr op = make_op(call.op->name(), call.op->attrs());
    std::vector<Tensor> outputs;
    {
      test::GradModeScope mode(call.grad_mode);  // as the call was recorded
      outputs = dispatch(op, inputs, Loc::current());
    }
    ASSERT_EQ(outputs.size(), call.outputs.size()) << what;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Storage* s = call.outputs[i].storage().get();
      // A fresh output stands for its storage; a written or viewed input already does.
      if (!replayed.count(s)) replayed[s] = outputs[i];
    }
  }
  for (const char* expected : {"conv2d", "batch_norm", "dropout", "bernoulli", "cross_entropy",
                               "conv2d_backward_weight", "adam_update", "copy_"})
    EXPECT_TRUE(names.count(expected)) << expected << " was not seen";

  // The real step changed the state; the replay changed the copies identically.
  const std::vector<Tensor> after = step.state();
  ASSERT_EQ(after.size(), before.size());
  int changed = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const Tensor& copy = replayed.at(before[i].storage().get());
    EXPECT_TRUE(bit_identical(copy, after[i]))
        << "state tensor " << i << " " << after[i].describe();
    changed += bit_identical(snapshot[i], after[i]) ? 0 : 1;
  }
  // Parameters, both Adam moments and batch norm's statistics moved (the input and target did not).
  EXPECT_GE(changed, static_cast<int>(step.model->parameters().size()) * 3);
  EXPECT_TRUE(bit_identical(lookup(loss, "the loss"), loss));
  for (const Tensor& p : step.model->parameters())
    EXPECT_TRUE(bit_identical(lookup(p.grad(), "a gradient"), p.grad()));
}

}  // namespace
}  // namespace kiln
