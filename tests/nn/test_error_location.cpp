// Errors raised inside kiln name the user's line, not kiln's (Note [user call site]): inside a
// layer's forward, through C++ operators, for out-of-memory inside an op, and for ops recorded
// inside a layer.
#include <gtest/gtest.h>

#include "kiln/autograd/engine.h"
#include "kiln/core/allocator.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;

std::string here(int line) {
  return "test_error_location.cpp:" + std::to_string(line);
}

// Ends "— at <where>": the location is the last thing in every error.
void expect_at(const std::string& what, const std::string& where) {
  EXPECT_TRUE(what.ends_with("— at " + where))
      << "expected the error to end at " << where << ", got: " << what;
}

TEST(ErrorLocation, ALayerCalledWithTheWrongInputNamesTheCall) {
  nn::Linear layer(10, 4);
  Tensor x = zeros({2, 7});
  const int line = __LINE__ + 1;
  std::string what = error_of([&] { layer(x); });
  expect_contains(what, {"float32[2, 7]"});
  expect_at(what, here(line));
  EXPECT_EQ(what.find("layers.cpp"), std::string::npos) << what;
}

TEST(ErrorLocation, NestedLayersNameTheOutermostUserCall) {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 5),
                                                std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(6, 2));
  const int line = __LINE__ + 1;
  std::string what = error_of([&] { (*model)(zeros({4, 3})); });
  expect_at(what, here(line));
}

// A user's own module: the error names the line inside its forward that called the layer.
struct TwoLayers : nn::Module {
  TwoLayers() : Module("TwoLayers") {
    a = register_module("a", std::make_shared<nn::Linear>(3, 5));
    b = register_module("b", std::make_shared<nn::Linear>(4, 2));
  }
  static inline int b_line = 0;
  Tensor forward(const Tensor& x) override {
    Tensor h = (*a)(x);
    b_line = __LINE__ + 1;
    return (*b)(h);
  }
  std::shared_ptr<nn::Linear> a, b;
};

TEST(ErrorLocation, AUserModuleNamesItsOwnLine) {
  TwoLayers net;
  std::string what = error_of([&] { net(zeros({2, 3})); });
  expect_at(what, here(TwoLayers::b_line));
  // Called as forward() directly (no call site recorded): the stack names the same line.
  what = error_of([&] { net.forward(zeros({2, 3})); });
  expect_at(what, here(TwoLayers::b_line));
}

TEST(ErrorLocation, OperatorsNameTheUsersLine) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  const int line = __LINE__ + 1;
  std::string what = error_of([&] { (void)(a + b); });
  expect_contains(what, {"[add]", "float32[2, 3]", "float32[4]"});
  expect_at(what, here(line));
  const int line2 = __LINE__ + 1;
  what = error_of([&] { (void)(a * b); });
  expect_at(what, here(line2));
}

TEST(ErrorLocation, OutOfMemoryInsideAnOpNamesTheOpAndTheLine) {
  Tensor a = ones({2048, 2048});  // exp's output needs 16 MiB: a new segment
  empty_cache();
  set_memory_limit(memory_stats().reserved_bytes + 1024);
  const int line = __LINE__ + 1;
  std::string what = error_of([&] { (void)exp(a); });
  set_memory_limit(0);
  expect_contains(what, {"[exp] out of memory", "16.00 MiB", "with a limit of"});
  expect_at(what, here(line));
}

TEST(ErrorLocation, OpsRecordedInsideALayerNameTheUsersLine) {
  nn::Linear layer(2, 2);
  Tensor x = ones({1, 2});
  const int line = __LINE__ + 1;
  Tensor y = layer(x);
  Tensor loss = sum(y);
  loss.backward();
  const int again = __LINE__ + 1;
  std::string what = error_of([&] { loss.backward(); });
  expect_contains(what, {"second time", "(called at " + here(line) + ")"});
  expect_at(what, here(again));
}

}  // namespace
}  // namespace kiln
