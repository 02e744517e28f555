// The error texts users see most: each names the op in brackets, the offending
// shapes/dtypes/devices and the caller's line.
#include <gtest/gtest.h>

#include "tests/support/test_util.h"

#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/unary.h"

namespace kiln {
namespace {

using test::error_of;
using test::expect_contains;
using test::leaf;

std::string here(int line) {
  return "test_errors.cpp:" + std::to_string(line);
}

TEST(Errors, BroadcastMismatchInAdd) {
  Tensor a = zeros({2, 3});
  Tensor b = zeros({4});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { add(a, b); });
  expect_contains(what, {"[add]", "float32[2, 3]", "float32[4]", here(line)});
  // The message format: "[op] ... — at file:line" with the location last.
  EXPECT_EQ(what.rfind("[add]", 0), 0u) << what;
  EXPECT_EQ(what.substr(what.size() - here(line).size()), here(line));
}

TEST(Errors, MatmulInnerDimensionMismatch) {
  Tensor a = zeros({2, 3});
  Tensor b = zeros({4, 5});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { matmul(a, b); });
  expect_contains(what,
                  {"[matmul]", "inner", "float32[2, 3]", "float32[4, 5]", "3 != 4", here(line)});
}

TEST(Errors, DeviceMismatchNamesBothDevices) {
  Tensor c = zeros({2});
  Tensor m = zeros({2}, TensorOptions{}.with_device(kMeta));
  int line = __LINE__ + 1;
  std::string what = error_of([&] { add(c, m); });
  expect_contains(what,
                  {"[add]", "same device", "float32[2] on cpu", "float32[2] on meta", here(line)});
  // matmul reaches its bmm primitive before the device check, so the text names [bmm] (see the
  // report on linalg); the devices and the caller's line are right.
  line = __LINE__ + 1;
  what = error_of([&] { matmul(m, zeros({2, 2})); });
  expect_contains(what, {"same device", "on meta", "on cpu", here(line)});
}

TEST(Errors, UnsupportedDtype) {
  Tensor i = tensor<int64_t>({1, 2, 3, 4}, Shape{2, 2});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { matmul(i, i); });
  expect_contains(what, {"[matmul]", "int64[2, 2] on cpu", here(line)});
  line = __LINE__ + 1;
  what = error_of([&] { softmax(i, 0); });
  expect_contains(what, {"[softmax]", "floating-point", "int64[2, 2] on cpu", here(line)});
}

TEST(Errors, InPlaceModificationOfASavedTensor) {
  Tensor x = leaf({1.0, 2.0});
  int tanh_line = __LINE__ + 1;
  Tensor y = tanh(x);  // saves its output
  int add_line = __LINE__ + 1;
  y.add_(1.0);
  int backward_line = __LINE__ + 1;
  std::string what = error_of([&] { sum(y).backward(); });
  expect_contains(what, {"[backward]", "'tanh'", "'add_'", "modified in place", here(tanh_line),
                         here(add_line)});
  // The line of the backward() call comes last, as in every error.
  EXPECT_TRUE(what.ends_with("— at " + here(backward_line))) << what;
}

TEST(Errors, SecondBackwardWithoutRetainGraph) {
  Tensor x = leaf({1.0, 2.0});
  int exp_line = __LINE__ + 1;
  Tensor loss = sum(exp(x));
  loss.backward();
  int backward_line = __LINE__ + 1;
  std::string what = error_of([&] { loss.backward(); });
  expect_contains(what, {"[backward]", "second time", "retain_graph", "'exp'", here(exp_line)});
  EXPECT_TRUE(what.ends_with("— at " + here(backward_line))) << what;
  // grad() after backward on the same graph fails the same way.
  what = error_of([&] { grad({loss}, {x}); });
  expect_contains(what, {"second time", "retain_graph"});
}

TEST(Errors, BackwardOnANonScalarWithoutGradOutput) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 2.0);
  int line = __LINE__ + 1;
  std::string what = error_of([&] { y.backward(); });
  expect_contains(what, {"[backward]", "scalar", "float64[2] on cpu", "grad_output", here(line)});
  line = __LINE__ + 1;
  what = error_of([&] { y.backward(tensor({1.0, 2.0, 3.0}, {DType::Float64})); });
  expect_contains(what, {"[backward]", "[2]", "float64[3] on cpu", here(line)});
  EXPECT_FALSE(x.grad().defined());
}

TEST(Errors, BackwardOfATensorWithoutHistory) {
  Tensor c = tensor({1.0});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { c.backward(); });
  expect_contains(what, {"[backward]", "does not require grad", "float32[1] on cpu", here(line)});
}

TEST(Errors, ItemOnAMultiElementTensor) {
  Tensor t = zeros({2, 2});
  int line = __LINE__ + 1;
  std::string what = error_of([&] { t.item(); });
  expect_contains(
      what, {"[item]", "exactly one element", "float32[2, 2] on cpu", "4 elements", here(line)});
  EXPECT_DOUBLE_EQ(ones({1, 1}).item(), 1.0);
}

}  // namespace
}  // namespace kiln
