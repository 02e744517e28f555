// Composite ops keep their identity (Note [composite ops]): matmul, linear and batch_norm_eval
// are one op each for dispatch modes and the tape, and the ops they compute with stay inside.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/autograd/node.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/profiler.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/support/op_recorder.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_allclose;
using test::expect_error;

std::vector<std::string> op_names(const std::vector<test::RecordedCall>& calls) {
  std::vector<std::string> names;
  for (const auto& c : calls) names.push_back(c.op->name());
  return names;
}

Tensor leaf_of(Shape shape, uint64_t seed) {
  Tensor t = sample_tensor(std::move(shape), seed);
  t.set_requires_grad(true);
  return t;
}

TEST(CompositeOps, ModesSeeOneOpPerCall) {
  Tensor x = sample_tensor({2, 3, 4}, 1), w = sample_tensor({5, 4}, 2), b = sample_tensor({5}, 3);
  Tensor rm = sample_tensor({3}, 4), rv = sample_tensor({3}, 5, 0.5, 2);
  test::RecordOps rec;
  matmul(x, transpose(w, 0, 1));
  linear(x, w, b);
  batch_norm(x, rm, rv, Tensor(), Tensor(), false);
  EXPECT_EQ(op_names(rec.calls()),
            (std::vector<std::string>{"permute", "matmul", "linear", "batch_norm_eval"}));
  EXPECT_EQ(rec.calls()[2].op->attrs(), (nlohmann::json{{"has_bias", true}}));
  EXPECT_EQ(rec.calls()[3].op->attrs()["has_weight"], false);
}

TEST(CompositeOps, TapeRecordsOneNodeWithTheCompositesGradient) {
  Tensor x = leaf_of({3, 4}, 6), w = leaf_of({5, 4}, 7), b = leaf_of({5}, 8);
  Tensor y = linear(x, w, b);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "linear");
  Tensor z = matmul(x, transpose(w, 0, 1));
  EXPECT_EQ(z.grad_fn()->name(), "matmul");
  // The composite's vjp matches the gradient of the same computation written out.
  std::vector<Tensor> g = grad({sum(mul(y, y))}, {x, w, b});
  Tensor y2 = add(bmm(unsqueeze(x, 0), unsqueeze(transpose(w, 0, 1), 0)), b);
  std::vector<Tensor> want = grad({sum(mul(y2, y2))}, {x, w, b});
  for (size_t i = 0; i < 3; ++i) expect_allclose(g[i], want[i], 1e-12);
}

TEST(CompositeOps, SecondDerivativesGoThroughTheVjps) {
  Tensor x = leaf_of({2, 3}, 9), w = leaf_of({4, 3}, 10), b = leaf_of({4}, 11);
  EXPECT_TRUE(gradgradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{kiln::tanh(linear(in[0], in[1], in[2]))};
      },
      {x, w, b}));
  Tensor a = leaf_of({2, 3, 4}, 12), m = leaf_of({4}, 13);
  EXPECT_TRUE(gradgradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{kiln::tanh(matmul(in[0], in[1]))};
      },
      {a, m}));
  Tensor bx = leaf_of({2, 3, 2}, 14), bw = leaf_of({3}, 15);
  Tensor rm = sample_tensor({3}, 16), rv = sample_tensor({3}, 17, 0.5, 2);
  EXPECT_TRUE(gradgradcheck(
      [rm, rv](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{
            kiln::tanh(batch_norm(in[0], rm, rv, in[1], Tensor(), false, 0.1, 1e-3))};
      },
      {bx, bw}));
}

TEST(CompositeOps, BatchNormEvalMatchesTheReferenceDecomposition) {
  // float32 statistics of a float64 input are converted, as in PyTorch.
  Tensor x = sample_tensor({2, 3, 4, 2}, 18, -2, 2);
  Tensor rm = to_dtype(sample_tensor({3}, 19), DType::Float32);
  Tensor rv = to_dtype(sample_tensor({3}, 20, 0.5, 2), DType::Float32);
  Tensor w = sample_tensor({3}, 21), b = sample_tensor({3}, 22);
  Tensor got = batch_norm(x, rm, rv, w, b, false, 0.1, 1e-4);
  Tensor want = reference::batch_norm(x, to_dtype(rm, DType::Float64), to_dtype(rv, DType::Float64),
                                      w, b, false, 1e-4);
  expect_allclose(got, want, 1e-12);
}

TEST(CompositeOps, ProfilerTimesTheCompositeAsOneOp) {
  Tensor a = sample_tensor({8, 8}, 23), b = sample_tensor({8, 8}, 24);
  Profiler prof;
  matmul(a, b);
  prof.stop();
  std::vector<std::string> names;
  for (const OpProfile& p : prof.key_averages()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"matmul"}));
}

TEST(CompositeOps, BadInputsNameTheCompositeAndTheShapes) {
  Tensor x = sample_tensor({3, 4}, 25);
  expect_error(
      [&] {
        linear(x, sample_tensor({5, 3}, 26));
      },
      {"[linear]", "in_features", "[3, 4]", "[5, 3]"});
  expect_error(
      [&] {
        linear(x, sample_tensor({5, 4}, 27), sample_tensor({4}, 28));
      },
      {"[linear]", "bias of shape [5] (or one value)"});
  expect_error([&] { linear(x, sample_tensor({4}, 32)); }, {"[linear]", "weight [out_features"});
  expect_error(
      [&] {
        linear(x, to_dtype(sample_tensor({5, 4}, 29), DType::Float32));
      },
      {"[linear]", "one dtype"});
  expect_error(
      [&] {
        matmul(sample_tensor({2, 3, 4}, 30), sample_tensor({3, 4, 5}, 31));
      },
      {"[matmul]", "broadcast"});
  expect_error([&] { make_op("linear", nlohmann::json::object()); }, {"linear", "has_bias"});
}

}  // namespace
}  // namespace kiln
