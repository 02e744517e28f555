// Elementwise fusion (Note [graph passes], Note [fused elementwise]): chains become one node, and
// every result (values, layouts, gradients) is the unfused chain's bit for bit.
#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/graph/serialize.h"
#include "kiln/ops/elementwise_tile.h"
#include "kiln/ops/fused_elementwise.h"
#include "kiln/ops/op_factory.h"
#include "tests/graph/passes/pass_test_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::graph::test;

Graph fused(const Graph& before) {
  Graph after = before;
  passes::fuse_elementwise(after);
  after.validate();
  return after;
}

// Random values with the awkward ones mixed in: zeros of both signs, infinities, NaN.
Tensor awkward(Shape shape, DType dtype, uint64_t seed) {
  manual_seed(seed);
  Tensor x = to_dtype(randn(shape) * 3.0, dtype);
  std::vector<double> v = x.to_vector<double>();
  const double specials[] = {0.0,
                             -0.0,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             1e-30,
                             -88.5,
                             40.0};
  for (size_t i = 0; i < v.size(); i += 7) v[i] = specials[(i / 7) % 8];
  return tensor(v, shape, TensorOptions{dtype});
}

// Bit for bit, except that a NaN matches any NaN: which operand's NaN an instruction propagates
// when both are NaN (and so the sign of the result's NaN) depends on the operand order the
// compiler picked for a commutative op, which differs between a vectorized loop's body and its
// tail even in one unfused kernel.
void expect_same_bits_or_nan(const Graph& before, const Graph& after, const Tensors& inputs) {
  const Tensors a = run(before, inputs), b = run(after, inputs);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].shape(), b[k].shape());
    ASSERT_EQ(a[k].dtype(), b[k].dtype());
    const std::vector<double> x = a[k].to_vector<double>(), y = b[k].to_vector<double>();
    int64_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (!(std::isnan(x[i]) && std::isnan(y[i])) && std::memcmp(&x[i], &y[i], sizeof(double)))
        if (++differ <= 3)
          ADD_FAILURE() << "output " << k << " at " << i << ": " << y[i] << " fused, " << x[i]
                        << " unfused";
    EXPECT_EQ(differ, 0) << "output " << k;
  }
}

TEST(FuseElementwise, ABiasAddAndActivationAfterAMatmulBecomeOneNode) {
  Tensor w = randn({8, 5}), b = randn({5});
  const Graph before =
      raw_trace([&](const Tensors& in) { return Tensors{relu(matmul(in[0], w) + b) * 0.5}; },
                {TensorSpec({"batch", 8})});
  const Graph after = fused(before);
  EXPECT_EQ(count_nodes(after, "fused_elementwise"), 1) << both(before, after);
  EXPECT_EQ(count_nodes(after, "add"), 0);
  EXPECT_EQ(count_nodes(after, "relu"), 0);
  EXPECT_EQ(count_nodes(after, "matmul"), 1);
  kiln::test::expect_contains(to_text(after), {"fused_elementwise(", "\"op\":\"relu\""});
  for (int64_t batch : {1, 7, 64}) expect_same_results(before, after, {randn({batch, 8})});
}

// Every op with a tile, in a chain, in both dtypes, on values that include NaN, infinities and
// signed zeros: the fused kernel runs each op's own scalar function, so nothing may differ.
TEST(FuseElementwise, EveryOpWithATileGivesTheUnfusedBitsInBothDtypes) {
  const std::vector<std::string> tiles = ops_with_elementwise_tiles(DeviceType::CPU);
  EXPECT_GE(tiles.size(), 25u);
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Graph before = raw_trace(
        [](const Tensors& in) {
          const Tensor& x = in[0];
          const Tensor& y = in[1];
          Tensor a = neg(abs(x)) + sign(y) - exp(clamp(x, -5.0, 5.0)) * log(abs(y));
          Tensor c = log1p(abs(a)) / sqrt(abs(x)) + rsqrt(abs(y)) - sin(x) * cos(y);
          Tensor d = tanh(c) + sigmoid(x) - erf(y) + gelu(x) + gelu(y, "tanh") + silu(c);
          Tensor e = softplus(d, 2.0, 5.0) + pow(x, 2.0) + pow(abs(y), 0.5) + relu(d);
          Tensor f = maximum(e, x) - minimum(e, y) + pow(abs(x), y) + relu_backward(e, c);
          return Tensors{f, a};
        },
        {TensorSpec({"batch", 33}, dt), TensorSpec({"batch", 33}, dt)});
    const Graph after = fused(before);
    EXPECT_EQ(count_nodes(after, "fused_elementwise"), 1) << both(before, after);
    EXPECT_EQ(after.nodes.size(), 1u) << both(before, after);
    for (const Node& n : before.nodes)
      EXPECT_TRUE(has_elementwise_tile(n.op->name())) << n.op->name() << " ran unfused";
    // 40000 rows: several threads and pieces; 3 rows: one short piece.
    for (int64_t rows : {3, 1200})
      expect_same_bits_or_nan(before, after,
                              {awkward({rows, 33}, dt, 1), awkward({rows, 33}, dt, 2)});
  }
}

TEST(FuseElementwise, InputsBroadcastEveryWayAndScalarsOfOtherDtypesConvert) {
  const Graph before = raw_trace(
      [](const Tensors& in) {
        Tensor s = full({}, 3, {DType::Int64});  // a 0-dim int64 scalar in a float32 chain
        return Tensors{sigmoid(in[0] + in[1]) * s - in[2] * 0.25};
      },
      {TensorSpec({"batch", 1}), TensorSpec({1, 6}), TensorSpec({})});
  const Graph after = fused(before);
  EXPECT_EQ(count_nodes(after, "fused_elementwise"), 1) << both(before, after);
  expect_same_results(before, after, {randn({5, 1}), randn({1, 6}), randn({})});
}

TEST(FuseElementwise, AValueReadOutsideTheChainIsAnOutputAndClosesIt) {
  Tensor w = randn({6, 6});
  const Graph before = raw_trace(
      [&](const Tensors& in) {
        Tensor h = in[0] * 2.0 + 1.0;  // read by matmul (outside), then by the relu chain
        Tensor m = matmul(h, w);       // closes h's group
        Tensor y = relu(h) * 3.0 + m;  // a new group
        return Tensors{y, tanh(h)};    // tanh(h): h's group was closed, so another group
      },
      {TensorSpec({"batch", 6})});
  const Graph after = fused(before);
  EXPECT_EQ(count_nodes(after, "fused_elementwise"), 2) << both(before, after);
  EXPECT_EQ(count_nodes(after, "tanh"), 1) << "alone, it is not worth a fused node";
  expect_same_results(before, after, {randn({4, 6})});
}

TEST(FuseElementwise, AnIntermediateThatIsAlsoAGraphOutputIsWritten) {
  const Graph before = raw_trace(
      [](const Tensors& in) {
        Tensor h = exp(in[0]) - 1.0;
        return Tensors{h, relu(h) * h};
      },
      {TensorSpec({"batch", 9})});
  const Graph after = fused(before);
  ASSERT_EQ(after.nodes.size(), 2u) << both(before, after);  // the scalar and the fused node
  EXPECT_EQ(after.nodes.back().outputs.size(), 2u);
  expect_same_results(before, after, {randn({3, 9})});
}

TEST(FuseElementwise, EffectsIntegersAndMixedDtypesStayUnfused) {
  const Graph before = raw_trace(
      [](const Tensors& in) {
        Tensor a = relu(in[0]) + 1.0;
        a.mul_(2.0);                        // written: neither a nor its readers fuse
        Tensor i = relu(in[1]) + 1;         // int32
        Tensor mixed = exp(in[0]) + in[2];  // float32 + float64 is float64 from float32
        return Tensors{a * 3.0, neg(i) * 2, relu(mixed) * 2.0};
      },
      {TensorSpec({4}), TensorSpec({4}, DType::Int32), TensorSpec({4}, DType::Float64)});
  const Graph after = fused(before);
  EXPECT_EQ(count_nodes(after, "fused_elementwise"), 1) << both(before, after);
  EXPECT_EQ(count_nodes(after, "mul_"), count_nodes(before, "mul_"));
  EXPECT_EQ(count_nodes(after, "exp"), 1) << "its output meets a float64 operand";
  expect_same_results(
      before, after,
      {randn({4}), tensor({-2.0, 0.0, 3.0, 5.0}, {DType::Int32}), randn({4}, {DType::Float64})});
}

TEST(FuseElementwise, ARandomNodeInTheMiddleKeepsItsPlaceInTheStream) {
  const Graph before = raw_trace(
      [](const Tensors& in) { return Tensors{relu(dropout(exp(in[0]) + 1.0, 0.5, true)) * 2.0}; },
      {TensorSpec({"batch", 16})});
  const Graph after = fused(before);
  EXPECT_EQ(count_nodes(after, "bernoulli"), 1) << both(before, after);
  manual_seed(3);
  const Tensors a = run(before, {ones({8, 16})});
  manual_seed(3);
  const Tensors b = run(after, {ones({8, 16})});
  kiln::test::expect_bit_identical(b[0], a[0]);
}

TEST(FuseElementwise, TheOutputLayoutIsEagersForChannelsLastInputs) {
  Tensor shift = randn({1, 3, 1, 1});
  auto fn = [&](const Tensors& in) { return Tensors{relu(in[0] * 0.5 + shift)}; };
  const Graph after = fused(raw_trace(fn, {TensorSpec({"batch", 3, 4, 5})}));
  Tensor x = contiguous(randn({2, 3, 4, 5}), MemoryFormat::kChannelsLast);
  const Tensor want = fn({x})[0];
  const Tensor got = run(after, {x})[0];
  EXPECT_TRUE(got.is_channels_last());
  EXPECT_EQ(got.strides(), want.strides());
  kiln::test::expect_bit_identical(got, want);
}

TEST(FuseElementwise, GradientsThroughAFusedGraphAreTheChainsBitForBit) {
  Tensor w = randn({5, 4}), b = randn({4});
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  auto fn = [&](const Tensors& in) {
    Tensor h = matmul(in[0], w) + b;
    return Tensors{(sigmoid(h) * h - tanh(h) * 0.5).sum()};
  };
  FunctionOptions options;
  Function f = function(fn, {TensorSpec({"batch", 5})}, options);
  Tensor x = randn({6, 5});
  f({x})[0].backward();
  ASSERT_GE(count_nodes(*f.graphs()[0], "fused_elementwise"), 1) << to_text(*f.graphs()[0]);
  const Tensor gw = w.grad().clone(), gb = b.grad().clone();
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  fn({x})[0].backward();
  kiln::test::expect_bit_identical(gw, w.grad());
  kiln::test::expect_bit_identical(gb, b.grad());
}

TEST(FuseElementwise, ATracedTrainingStepFusesItsBackwardAndStaysExact) {
  manual_seed(0);
  Tensor w1 = randn({12, 16}) * 0.3, b1 = zeros({16}), w2 = randn({16, 3}) * 0.3;
  for (Tensor* p : {&w1, &b1, &w2}) p->set_requires_grad(true);
  auto step = [&](const Tensors& in) {
    Tensor h = gelu(matmul(in[0], w1) + b1);
    Tensor loss = cross_entropy(matmul(h, w2), in[1]);
    Tensors out = grad({loss}, {w1, b1, w2});
    out.insert(out.begin(), loss);
    return out;
  };
  // A static batch: cross_entropy's mean divides by it.
  const std::vector<TensorSpec> sig = {TensorSpec({10, 12}), TensorSpec({10}, DType::Int64)};
  const Graph before = raw_trace(step, sig);
  const Graph after = optimize(before);
  EXPECT_GE(count_nodes(after, "fused_elementwise"), 2) << to_text(after);
  expect_same_results(before, after,
                      {randn({10, 12}), tensor({0.0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, {DType::Int64})});
}

TEST(FuseElementwise, SkippingThePassByNameLeavesTheChain) {
  const Graph before =
      raw_trace([](const Tensors& in) { return Tensors{relu(in[0] + 1.0)}; }, {TensorSpec({3})});
  OptimizeOptions o;
  o.skip = {"fuse"};
  EXPECT_EQ(count_nodes(optimize(before, o), "fused_elementwise"), 0);
  EXPECT_EQ(count_nodes(optimize(before), "fused_elementwise"), 1);
}

TEST(FuseElementwise, AFusedGraphSurvivesJsonAndABadProgramIsAnError) {
  const Graph after =
      fused(raw_trace([](const Tensors& in) { return Tensors{relu(in[0] * in[1] - 2.0)}; },
                      {TensorSpec({"batch", 4}), TensorSpec({4})}));
  const Graph loaded = from_json(nlohmann::json::parse(to_json(after).dump()), {});
  expect_same_results(after, loaded, {randn({3, 4}), randn({4})});

  nlohmann::json attrs = fused_elementwise_attrs(1, DType::Float32, {{"relu", {}, {0}}}, {1});
  attrs["program"][0]["args"] = {3};
  kiln::test::expect_error([&] { make_op("fused_elementwise", attrs); },
                           {"step 0 reads ref 3, which is neither an input nor an earlier step"});
  attrs["program"][0] = {{"op", "matmul"}, {"args", {0}}};
  kiln::test::expect_error([&] { make_op("fused_elementwise", attrs); },
                           {"step 0 ('matmul'", "elementwise ops of one or two inputs"});
  attrs["program"][0] = {{"op", "nope"}, {"args", {0}}};
  kiln::test::expect_error([&] { make_op("fused_elementwise", attrs); }, {"names no op: 'nope'"});
  attrs["program"][0] = {{"op", "relu"}, {"args", {0}}};
  attrs["outputs"] = {0};
  kiln::test::expect_error([&] { make_op("fused_elementwise", attrs); },
                           {"'outputs'", "ref 0 names no step"});
  attrs["outputs"] = {1};
  attrs["dtype"] = "int32";
  kiln::test::expect_error([&] { make_op("fused_elementwise", attrs); },
                           {"must be float32 or float64"});
}

TEST(FuseElementwise, TheOpRefusesWrongInputsNamingTheCall) {
  const std::vector<FusedStep> prog = {{"mul", {}, {0, 1}}, {"relu", {}, {2}}};
  kiln::test::expect_error([&] { fused_elementwise({randn({3})}, DType::Float32, prog, {3}); },
                           {"[fused_elementwise]", "step 0 reads ref 1, which is neither an input",
                            "test_fuse_elementwise.cpp"});
  kiln::test::expect_error(
      [&] {
        fused_elementwise({randn({3}), randn({3}, {DType::Float64})}, DType::Float32, prog, {3});
      },
      {"expected input 1 of dtype float32", "float64[3]"});
  kiln::test::expect_error(
      [&] {
        fused_elementwise({randn({3}), randn({2})}, DType::Float32, prog, {3});
      },
      {"[3]", "[2]"});
  // An output smaller than the whole computation: the kernel writes one shape.
  const std::vector<FusedStep> small = {{"relu", {}, {1}}, {"add", {}, {0, 2}}};
  kiln::test::expect_error(
      [&] {
        fused_elementwise({randn({2, 3}), randn({3})}, DType::Float32, small, {2, 3});
      },
      {"output ref 2 has shape [3]", "[2, 3]"});
}

}  // namespace
}  // namespace kiln::graph
