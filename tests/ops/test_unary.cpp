#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/autograd/gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/sample_data.h"
#include "tests/support/op_recorder.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
  }
}

Tensor f64(std::vector<double> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return tensor<double>(v, shape);
}

// Gradient of sum(fn(x)) at x (float64).
std::vector<double> grad_of(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  Tensor leaf = x.detach().clone();
  leaf.set_requires_grad(true);
  return values(grad({fn(leaf).sum()}, {leaf})[0]);
}

TEST(Unary, ElementaryValues) {
  std::vector<double> xs = {0.5, 1.0, 2.0, 3.5};
  Tensor x = f64(xs);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    double (*ref)(double);
  };
  std::vector<Case> cases = {
      {"exp", [](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); }},
      {"log", [](const Tensor& t) { return log(t); }, [](double v) { return std::log(v); }},
      {"log1p", [](const Tensor& t) { return log1p(t); }, [](double v) { return std::log1p(v); }},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }, [](double v) { return std::sqrt(v); }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); },
       [](double v) { return 1 / std::sqrt(v); }},
      {"sin", [](const Tensor& t) { return sin(t); }, [](double v) { return std::sin(v); }},
      {"cos", [](const Tensor& t) { return cos(t); }, [](double v) { return std::cos(v); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }, [](double v) { return std::tanh(v); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); },
       [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"neg", [](const Tensor& t) { return neg(t); }, [](double v) { return -v; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor y = c.op(x);
    EXPECT_EQ(y.dtype(), DType::Float64);
    std::vector<double> want;
    for (double v : xs) want.push_back(c.ref(v));
    expect_near(values(y), want);
  }
}

TEST(Unary, SignAbsReluClampValues) {
  Tensor x = f64({-2.0, -0.5, 0.0, 0.75, 3.0});
  expect_near(values(abs(x)), {2.0, 0.5, 0.0, 0.75, 3.0});
  expect_near(values(sign(x)), {-1.0, -1.0, 0.0, 1.0, 1.0});
  expect_near(values(relu(x)), {0.0, 0.0, 0.0, 0.75, 3.0});
  expect_near(values(clamp(x, -1.0, 1.0)), {-1.0, -0.5, 0.0, 0.75, 1.0});
  expect_near(values(clamp(x, 0.5, std::nullopt)), {0.5, 0.5, 0.5, 0.75, 3.0});
  expect_near(values(clamp(x, std::nullopt, -0.25)), {-2.0, -0.5, -0.25, -0.25, -0.25});
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor n = f64({nan});
  EXPECT_TRUE(std::isnan(values(relu(n))[0]));
  EXPECT_TRUE(std::isnan(values(clamp(n, 0.0, 1.0))[0]));
  EXPECT_EQ(values(sign(n))[0], 0.0);
}

TEST(Unary, ActivationValues) {
  // References from torch.nn.functional (float64).
  Tensor x = f64({-1.0, 0.0, 1.0, 2.0});
  expect_near(values(gelu(x)), {-0.15865525393145702, 0.0, 0.841344746068543, 1.9544997361036416});
  expect_near(values(gelu(x, "tanh")),
              {-0.15880800939172324, 0.0, 0.8411919906082768, 1.954597694087775});
  expect_near(values(silu(x)), {-0.2689414213699951, 0.0, 0.7310585786300049, 1.7615941559557646});
  expect_near(values(softplus(x)),
              {0.31326168751822286, 0.6931471805599453, 1.3132616875182228, 2.1269280110429727});
  // beta * x > threshold returns x itself.
  expect_near(values(softplus(x, 2.0, 1.5)), {0.06346400552148625, 0.34657359027997264, 1.0, 2.0});
  expect_near(values(pow(x, 2.0)), {1.0, 0.0, 1.0, 4.0});
  expect_near(values(pow(x, 3.0)), {-1.0, 0.0, 1.0, 8.0});
  expect_near(values(pow(f64({4.0, 0.25}), -0.5)), {0.5, 2.0});
  expect_near(values(pow(x, 0.0)), {1.0, 1.0, 1.0, 1.0});
}

TEST(Unary, FloatingFunctionsPromoteIntegersToFloat32) {
  Tensor i = tensor<int64_t>({1, 4}, Shape{2});
  Tensor y = sqrt(i);
  EXPECT_EQ(y.dtype(), DType::Float32);
  expect_near(values(y), {1.0, 2.0});
  Tensor b = tensor<bool>({true, false}, Shape{2});
  Tensor e = exp(b);
  EXPECT_EQ(e.dtype(), DType::Float32);
  expect_near(values(e), {std::exp(1.0), 1.0}, 1e-6);
  EXPECT_EQ(pow(i, 2.0).dtype(), DType::Float32);
  EXPECT_EQ(sigmoid(tensor<int32_t>({1}, Shape{1})).dtype(), DType::Float32);  // gelu refuses ints
}

TEST(Unary, IntegralFunctionsKeepIntegerDtypes) {
  Tensor i = tensor<int32_t>({-3, 0, 5}, Shape{3});
  for (const Tensor& y : {neg(i), abs(i), sign(i), relu(i), clamp(i, -1.0, 2.0)})
    EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(neg(i).to_vector<int64_t>(), (std::vector<int64_t>{3, 0, -5}));
  EXPECT_EQ(abs(i).to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 5}));
  EXPECT_EQ(sign(i).to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(relu(i).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 5}));
  EXPECT_EQ(clamp(i, -1.0, 2.0).to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 2}));
  // Fractional bounds on integers round inward; out-of-range bounds saturate.
  EXPECT_EQ(clamp(i, -2.5, 4.5).to_vector<int64_t>(), (std::vector<int64_t>{-2, 0, 4}));
  Tensor u = tensor<uint8_t>({0, 200}, Shape{2});
  EXPECT_EQ(clamp(u, -1000.0, 1e6).to_vector<int64_t>(), (std::vector<int64_t>{0, 200}));
  EXPECT_EQ(abs(u).to_vector<int64_t>(), (std::vector<int64_t>{0, 200}));
  Tensor b = tensor<bool>({true, false}, Shape{2});
  Tensor sb = sign(b);
  EXPECT_EQ(sb.dtype(), DType::Bool);
  EXPECT_EQ(sb.to_vector<bool>(), (std::vector<bool>{true, false}));
}

TEST(Unary, HalfPrecisionComputesInFloat32) {
  Tensor x = tensor<double>({0.5, 1.0, 2.0}, Shape{3}, TensorOptions{DType::Float16});
  Tensor y = exp(x);
  EXPECT_EQ(y.dtype(), DType::Float16);
  expect_near(values(y), {std::exp(0.5), std::exp(1.0), std::exp(2.0)}, 1e-3);
  Tensor bf = tensor<double>({-1.0, 2.0}, Shape{2}, TensorOptions{DType::BFloat16});
  EXPECT_EQ(relu(bf).dtype(), DType::BFloat16);
  expect_near(values(relu(bf)), {0.0, 2.0});
}

TEST(Unary, StridedInputs) {
  // A transposed view and a stepped view: the kernel must follow the strides.
  Tensor base = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = base.t();
  ASSERT_FALSE(t.is_contiguous());
  Tensor y = sqrt(t);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  expect_near(values(y),
              {1, std::sqrt(4.0), std::sqrt(2.0), std::sqrt(5.0), std::sqrt(3.0), std::sqrt(6.0)});
  Tensor stepped = make_view(base, {3}, {2}, 0);  // elements 1, 3, 5
  expect_near(values(neg(stepped)), {-1, -3, -5});
  expect_near(values(clamp(stepped, 2.0, 4.0)), {2, 3, 4});
  Tensor ints = tensor<int64_t>({1, -2, 3, -4}, Shape{2, 2}).t();
  EXPECT_EQ(abs(ints).to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 2, 4}));
  EXPECT_EQ(exp(f64({}, {0})).shape(), (Shape{0}));
}

TEST(Unary, LargeInputsMatchAcrossThreadChunks) {
  Tensor x = sample_tensor({300001}, 7, -3, 3);
  std::vector<double> xs = values(x);
  std::vector<double> got = values(gelu(x, "tanh"));
  for (size_t i = 0; i < xs.size(); i += 9973) {
    double v = xs[i];
    double want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(got[i], want, 1e-12);
  }
}

TEST(Unary, Gradients) {
  Tensor x = f64({-1.5, -0.5, 0.5, 1.5});
  expect_near(grad_of([](const Tensor& t) { return relu(t); }, x), {0, 0, 1, 1});
  expect_near(grad_of([](const Tensor& t) { return abs(t); }, x), {-1, -1, 1, 1});
  expect_near(grad_of([](const Tensor& t) { return sign(t); }, x), {0, 0, 0, 0});
  expect_near(grad_of([](const Tensor& t) { return neg(t); }, x), {-1, -1, -1, -1});
  // The gradient passes at the bounds themselves (PyTorch's convention).
  Tensor b = f64({-2.0, -1.0, 0.0, 1.0, 2.0});
  expect_near(grad_of([](const Tensor& t) { return clamp(t, -1.0, 1.0); }, b), {0, 1, 1, 1, 0});
  expect_near(grad_of([](const Tensor& t) { return clamp(t, std::nullopt, 0.0); }, b),
              {1, 1, 1, 0, 0});
  // x^0 has zero gradient even at 0.
  expect_near(grad_of([](const Tensor& t) { return pow(t, 0.0); }, f64({0.0, 2.0})), {0, 0});
  expect_near(grad_of([](const Tensor& t) { return pow(t, 3.0); }, f64({-1.0, 2.0})), {3, 12});
  // Above the threshold softplus is the identity.
  expect_near(grad_of([](const Tensor& t) { return softplus(t, 2.0, 1.5); }, f64({1.0, 0.0})),
              {1.0, 0.5});
  expect_near(grad_of([](const Tensor& t) { return gelu(t); }, f64({0.0})), {0.5});
  expect_near(grad_of([](const Tensor& t) { return gelu(t, "tanh"); }, f64({0.0})), {0.5});
}

TEST(Unary, SecondDerivatives) {
  // Gradients are written with public ops, so they are differentiable again.
  std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> fns = {
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return log(t); }},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
      {"sin", [](const Tensor& t) { return sin(t); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, "tanh"); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"softplus", [](const Tensor& t) { return softplus(t, 1.5, 20.0); }},
      {"pow", [](const Tensor& t) { return pow(t, 2.5); }},
  };
  Tensor x = sample_tensor({5}, 3, 0.5, 2.0);
  for (auto& [name, fn] : fns) {
    SCOPED_TRACE(name);
    auto f = [fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; };
    EXPECT_TRUE(gradgradcheck(f, {x}));
  }
}

TEST(Unary, AttributesIdentifyTheOp) {
  std::vector<nlohmann::json> seen;
  {
    test::RecordOps record;
    Tensor x = f64({1.0});
    gelu(x, "tanh");
    softplus(x, 2.0, 10.0);
    clamp(x, std::nullopt, 3.0);
    pow(x, 1.5);
    exp(x);
    for (const auto& c : record.calls()) seen.push_back({{c.op->name(), c.op->attrs()}});
  }
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0]["gelu"]["approximate"], "tanh");
  EXPECT_EQ(seen[1]["softplus"]["beta"], 2.0);
  EXPECT_EQ(seen[1]["softplus"]["threshold"], 10.0);
  EXPECT_TRUE(seen[2]["clamp"]["min"].is_null());
  EXPECT_EQ(seen[2]["clamp"]["max"], 3.0);
  EXPECT_EQ(seen[3]["pow_scalar"]["exponent"], 1.5);
  EXPECT_TRUE(seen[4]["exp"].empty());
}

TEST(Unary, Errors) {
  Tensor b = tensor<bool>({true, false}, Shape{2});
  expect_error([&] { neg(b); },
               {"[neg]", "negation of a bool tensor is not supported, use logical_not", "bool[2]",
                "test_unary.cpp"});
  expect_error([&] { abs(b); }, {"[abs]", "bool[2]", "test_unary.cpp"});
  expect_error([&] { relu(b); }, {"[relu]", "bool[2]", "test_unary.cpp"});
  Tensor x = f64({1.0, 2.0}, {1, 2});
  expect_error([&] { gelu(x, "erf"); },
               {"[gelu]", "\"none\"", "\"tanh\"", "\"erf\"", "float64[1, 2]", "test_unary.cpp"});
  expect_error([&] { clamp(x, std::nullopt, std::nullopt); },
               {"[clamp]", "min", "max", "float64[1, 2]", "test_unary.cpp"});
}

TEST(Unary, MetaInference) {
  Tensor m = empty({2, 3}, {DType::Int64, kMeta});
  Tensor y = exp(m);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(abs(m).dtype(), DType::Int64);
  expect_error([&] { gelu(m, "fast"); }, {"[gelu]", "int64[2, 3] on meta"});
}

}  // namespace
}  // namespace kiln
