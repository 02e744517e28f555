// The thread-local stack of dispatch modes (Note [dispatch modes]).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/profiler.h"
#include "tests/support/op_recorder.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

Tensor f32(std::initializer_list<double> v) {
  return tensor(v, {DType::Float32});
}
Tensor i64(std::initializer_list<double> v) {
  return tensor(v, {DType::Int64});
}

// Appends "<tag>:<op>>" before passing a call on and "<tag>:<op><" after.
class LogMode final : public DispatchMode {
 public:
  LogMode(std::string tag, std::vector<std::string>* log) : tag_(std::move(tag)), log_(log) {}
  const char* name() const override { return "log"; }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    log_->push_back(tag_ + ":" + call.op->name() + ">");
    std::vector<Tensor> out = next(call);
    log_->push_back(tag_ + ":" + call.op->name() + "<");
    return out;
  }

 private:
  std::string tag_;
  std::vector<std::string>* log_;
};

TEST(DispatchMode, MostRecentlyPushedSeesACallFirstAndLast) {
  std::vector<std::string> log;
  Tensor x = f32({1, 2});
  {
    DispatchModeGuard outer(std::make_shared<LogMode>("outer", &log));
    DispatchModeGuard inner(std::make_shared<LogMode>("inner", &log));
    EXPECT_EQ(dispatch_mode_stack().size(), 2u);
    neg(x);
  }
  EXPECT_TRUE(dispatch_mode_stack().empty());
  EXPECT_EQ(log,
            (std::vector<std::string>{"inner:neg>", "outer:neg>", "outer:neg<", "inner:neg<"}));
  neg(x);
  EXPECT_EQ(log.size(), 4u) << "a popped mode sees nothing";
}

TEST(DispatchMode, PushedModesSeeOutputsTheTapeAlreadyRecorded) {
  Tensor x = f32({1, 2});
  x.set_requires_grad(true);
  test::RecordOps record;
  Tensor y = mul(x, x);
  ASSERT_EQ(record.calls().size(), 1u);
  EXPECT_NE(record.calls()[0].outputs[0].grad_fn(), nullptr);
  EXPECT_EQ(record.calls()[0].outputs[0].impl(), y.impl());
}

// A mode that dispatches an op of its own for every call it sees.
class CloneEverythingMode final : public DispatchMode {
 public:
  const char* name() const override { return "clone_everything"; }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    ++seen;
    std::vector<Tensor> out = next(call);
    for (Tensor& t : out) t = t.clone();  // dispatched from inside handle()
    return out;
  }
  int seen = 0;
};

TEST(DispatchMode, AModeDoesNotSeeItsOwnOpsButTheModesBelowDo) {
  test::RecordOps below;
  auto mode = std::make_shared<CloneEverythingMode>();
  DispatchModeGuard guard(mode);
  neg(f32({1, 2}));
  EXPECT_EQ(mode->seen, 1) << "its clone did not come back to it";
  ASSERT_EQ(below.calls().size(), 2u);
  EXPECT_STREQ(below.calls()[0].op->name(), "neg");
  EXPECT_STREQ(below.calls()[1].op->name(), "clone");
}

// Logs only the calls of one op; declines the rest (DispatchMode::intercepts).
class OnlyMode final : public DispatchMode {
 public:
  OnlyMode(std::string op, std::vector<std::string>* log) : op_(std::move(op)), log_(log) {}
  const char* name() const override { return "only"; }
  bool intercepts(const OpCall& call) const override { return op_ == call.op->name(); }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    EXPECT_EQ(op_, call.op->name()) << "handle() called for a call the mode declined";
    log_->push_back(call.op->name());
    return next(call);
  }

 private:
  std::string op_;
  std::vector<std::string>* log_;
};

TEST(DispatchMode, AModeThatDeclinesACallIsSkippedForThatCallOnly) {
  std::vector<std::string> log;
  test::RecordOps below;
  {
    DispatchModeGuard guard(std::make_shared<OnlyMode>("exp", &log));
    Tensor y = exp(neg(f32({1, 2})));
    EXPECT_NEAR(y.to_vector<float>()[0], std::exp(-1.0f), 1e-6);
  }
  EXPECT_EQ(log, (std::vector<std::string>{"exp"}));
  ASSERT_EQ(below.calls().size(), 2u) << "a declined call still reaches the modes below";
  EXPECT_STREQ(below.calls()[0].op->name(), "neg");
}

TEST(DispatchMode, OpsAModeDispatchesReachOnlyTheModesBelowItEvenPastADecliningMode) {
  std::vector<std::string> above_log, below_log;
  auto cloner = std::make_shared<CloneEverythingMode>();
  {
    DispatchModeGuard bottom(std::make_shared<OnlyMode>("clone", &below_log));
    DispatchModeGuard middle(cloner);
    DispatchModeGuard top(std::make_shared<OnlyMode>("clone", &above_log));
    neg(f32({1, 2}));
  }
  EXPECT_EQ(cloner->seen, 1);
  EXPECT_TRUE(above_log.empty()) << "the top mode declined neg and is above the cloner";
  EXPECT_EQ(below_log, (std::vector<std::string>{"clone"}));
}

// Answers every call itself: the kernel never runs.
class ConstantMode final : public DispatchMode {
 public:
  const char* name() const override { return "constant"; }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext&) override {
    std::vector<Tensor> out;
    for (const TensorMeta& m : call.metas) out.push_back(full(m.shape, 7.0, {m.dtype}));
    return out;
  }
};

TEST(DispatchMode, AModeMayAnswerACallWithoutTheKernel) {
  Tensor y;
  {
    DispatchModeGuard guard(std::make_shared<ConstantMode>());
    y = exp(f32({0, 1}));
  }
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{7, 7}));
}

TEST(DispatchMode, AModeSeesOnlyItsOwnThreadsOps) {
  test::RecordOps record;
  std::thread other([] {
    EXPECT_TRUE(dispatch_mode_stack().empty());
    for (int i = 0; i < 10; ++i) neg(f32({1}));
  });
  other.join();
  EXPECT_TRUE(record.calls().empty());
  neg(f32({1}));
  EXPECT_EQ(record.calls().size(), 1u);
}

TEST(DispatchMode, BackwardOpsGoThroughTheModesToo) {
  Tensor x = test::leaf({1, 2, 3});
  Tensor loss = exp(x).sum();
  test::RecordOps record;
  loss.backward();
  std::vector<std::string> names;
  for (const auto& c : record.calls()) names.push_back(c.op->name());
  EXPECT_NE(std::find(names.begin(), names.end(), "mul"), names.end())
      << "exp's vjp multiplies the gradient by the saved output";
}

TEST(DispatchMode, AThrowingModeLeavesTheStackUsable) {
  class Throws final : public DispatchMode {
   public:
    const char* name() const override { return "throws"; }
    std::vector<Tensor> handle(const OpCall&, DispatchNext&) override {
      throw Error("[throws] refused");
    }
  };
  {
    DispatchModeGuard guard(std::make_shared<Throws>());
    EXPECT_THROW(neg(f32({1})), Error);
  }
  EXPECT_TRUE(dispatch_mode_stack().empty());
  EXPECT_EQ(neg(f32({1})).to_vector<float>(), (std::vector<float>{-1}));
}

TEST(DispatchMode, ProfilerAndAnomalyStillSeeEveryOp) {
  Profiler profiler;
  test::RecordOps record;
  neg(f32({1}));
  profiler.stop();
  ASSERT_EQ(profiler.key_averages().size(), 1u);
  EXPECT_EQ(profiler.key_averages()[0].name, "neg");
  DetectAnomalyGuard anomaly;
  EXPECT_THROW(log(f32({-1})), Error);
}

TEST(DispatchMode, KernelValueErrorsNameTheCallersLine) {
  try {
    gather(f32({1, 2}), 0, i64({5}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test_dispatch_mode.cpp"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
