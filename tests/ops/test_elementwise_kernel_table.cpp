// The elementwise families (unary, relu_backward, binary, compare) run on kernels registered by
// kiln/backend/cpu/ (Note [kernel table]); the kernels read attributes through unary_ops.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/unary.h"
#include "kiln/ops/unary_ops.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

TEST(ElementwiseKernelTable, TheElementwiseFamiliesHaveCpuKernels) {
  const std::vector<std::string> cpu = ops_with_kernels(DeviceType::CPU);
  for (const char* op : {"neg",         "abs",         "sign",     "relu",        "clamp",
                         "exp",         "log",         "log1p",    "sqrt",        "rsqrt",
                         "sin",         "cos",         "tanh",     "sigmoid",     "erf",
                         "gelu",        "silu",        "softplus", "pow_scalar",  "relu_backward",
                         "add",         "sub",         "mul",      "div",         "pow",
                         "maximum",     "minimum",     "eq",       "ne",          "lt",
                         "le",          "gt",          "ge",       "logical_and", "logical_or",
                         "logical_xor", "logical_not", "where"})
    EXPECT_TRUE(std::find(cpu.begin(), cpu.end(), op) != cpu.end()) << op;
}

TEST(ElementwiseKernelTable, TheAccessorsReadTheOpsAttributes) {
  OpPtr clamp_op = make_op("clamp", {{"min", -1.5}, {"max", nullptr}});
  EXPECT_EQ(detail::clamp_attrs(*clamp_op).min, -1.5);
  EXPECT_FALSE(detail::clamp_attrs(*clamp_op).max.has_value());
  EXPECT_TRUE(detail::gelu_attrs(*make_op("gelu", {{"approximate", "tanh"}})).use_tanh);
  EXPECT_EQ(detail::pow_scalar_attrs(*make_op("pow_scalar", {{"exponent", 3.0}})).exponent, 3.0);
  OpPtr softplus_op = make_op("softplus", {{"beta", 2.0}, {"threshold", 5.0}});
  const detail::SoftplusAttrs& sp = detail::softplus_attrs(*softplus_op);
  EXPECT_EQ(sp.beta, 2.0);
  EXPECT_EQ(sp.threshold, 5.0);
  // Another op's attributes are an internal error naming the op.
  try {
    detail::clamp_attrs(*make_op("relu", nlohmann::json::object()));
    ADD_FAILURE() << "expected InternalError";
  } catch (const InternalError& e) {
    test::expect_contains(e.what(), {"clamp_attrs", "relu"});
  }
}

TEST(ElementwiseKernelTable, KernelsComputeWhatTheAttributesSay) {
  Tensor x = tensor({-3.0, -0.5, 0.5, 3.0}, {DType::Float64});
  test::expect_values(clamp(x, -1.0, 1.0), {-1, -0.5, 0.5, 1});
  test::expect_values(pow(x, 2.0), {9, 0.25, 0.25, 9});
  // An integer input keeps its dtype, and a fractional bound rounds inward (Note [integer clamp]).
  Tensor i = tensor({-3.0, 0.0, 3.0}, {DType::Int64});
  Tensor c = clamp(i, -1.5, 2.5);
  EXPECT_EQ(c.dtype(), DType::Int64);
  test::expect_values(c, {-1, 0, 2});
  // An integer input of a floating function computes in float32.
  EXPECT_EQ(exp(i).dtype(), DType::Float32);
}

}  // namespace
}  // namespace kiln
