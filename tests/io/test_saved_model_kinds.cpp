// Saved-model bundles (Note [saved model]) of every kind of graph kiln makes: control flow, a
// bf16-autocast model, an int8 model (kiln quantize), and a bundle of format version 1 committed
// under tests/io/fixtures, which must keep loading.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kiln/graph/control_flow.h"
#include "kiln/io/npz.h"
#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "kiln/nn/traced.h"
#include "kiln/train/quantize.h"
#include "tests/io/temp_files.h"
#include "tests/support/source_file.h"
#include "tests/support/test_util.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using graph::Dim;
using graph::TensorSpec;
using test::expect_bit_identical;
using testing::TempRoot;

TensorSpec batch_of(std::vector<int64_t> one) {
  std::vector<Dim> dims = {Dim{0, "batch"}};
  for (int64_t d : one) dims.push_back(Dim{d, ""});
  return TensorSpec(dims, DType::Float32, "x");
}

void randomize(nn::Module& m, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard no_grad;
  for (Tensor& p : m.parameters()) p.copy_(mul(randn(p.shape(), {}, &gen), 0.3));
}

// A model with a data-dependent branch: rows whose mean is positive go through fc1 and relu,
// the others through fc2 and tanh (a batch-level cond on the first row's mean).
struct Branchy {
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(6, 4);
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(6, 4);
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    const Tensor& x = in[0];
    const Tensor pred = gt(mean(select(x, 0, 0)), 0.0);
    return cond(
        pred, [this](const std::vector<Tensor>& v) { return std::vector{relu((*fc1)(v[0]))}; },
        [this](const std::vector<Tensor>& v) { return std::vector{tanh((*fc2)(v[0]))}; }, {x});
  }
  std::function<std::string(const Tensor&)> names() const {
    auto a = fc1, b = fc2;
    return [a, b](const Tensor& t) -> std::string {
      if (t.is_same(a->weight)) return "fc1.weight";
      if (t.is_same(a->bias)) return "fc1.bias";
      if (t.is_same(b->weight)) return "fc2.weight";
      if (t.is_same(b->bias)) return "fc2.bias";
      return "";
    };
  }
};

graph::Function traced(const Branchy& model) {
  graph::FunctionOptions fo;
  fo.name = "branchy";
  fo.capture_name = model.names();
  NoGradGuard no_grad;
  return graph::function([model](const std::vector<Tensor>& in) { return model(in); },
                         {batch_of({6})}, fo);
}

TEST(SavedModelKinds, ACondModelTakesBothBranchesAsItDidBeforeSaving) {
  Branchy model;
  randomize(*model.fc1, 1);
  randomize(*model.fc2, 2);
  TempRoot dir("saved_model_kinds");
  save_model({ExportedFunction{.function = traced(model), .output_names = {"y"}}}, dir / "cond");
  const SavedModel loaded = load_model(dir / "cond");
  Generator gen(3);
  for (double shift : {2.0, -2.0}) {  // the then branch, the else branch
    const Tensor x = add(randn({5, 6}, {}, &gen), shift);
    const std::vector<Tensor> want = [&] {
      NoGradGuard no_grad;
      return model({x});
    }();
    expect_bit_identical(loaded({x})[0], want[0]);
  }
  EXPECT_EQ(loaded.signature("serving_default").outputs[0].describe(), "y: float32[-1 (batch), 4]");
}

TEST(SavedModelKinds, ABf16AutocastModelKeepsItsCasts) {
  auto model = nn::small_cnn(1, 10, 12);
  randomize(*model, 4);
  model->eval();
  const ExportedFunction f = [&] {
    NoGradGuard no_grad;
    AutocastGuard region(DType::BFloat16, AutocastOptions{.force = true});
    graph::FunctionOptions fo;
    fo.capture_name = nn::state_names(*model);
    return ExportedFunction{.function = nn::function(model, {batch_of({1, 12, 12})}, fo)};
  }();
  TempRoot dir("saved_model_kinds");
  save_model({f}, dir / "bf16", {.precision = "bf16-autocast"});
  const SavedModel loaded = load_model(dir / "bf16");
  EXPECT_EQ(loaded.info().precision, "bf16-autocast");
  // The graph computes in bfloat16 wherever autocast said so, on any CPU.
  int casts = 0;
  for (const graph::Node& n : loaded.graph("serving_default").nodes)
    for (int v : n.outputs)
      casts += loaded.graph("serving_default").value(v).dtype == DType::BFloat16;
  EXPECT_GT(casts, 0);
  Generator gen(5);
  const Tensor x = rand({3, 1, 12, 12}, {}, &gen);
  const Tensor want = [&] {
    NoGradGuard no_grad;
    AutocastGuard region(DType::BFloat16, AutocastOptions{.force = true});
    return (*model)(x);
  }();
  expect_bit_identical(loaded({x})[0], want);
}

TEST(SavedModelKinds, AnInt8ModelComputesWhatTheQuantizedModelDoes) {
  auto model = nn::small_cnn(1, 10, 8);
  randomize(*model, 6);
  Generator gen(7);
  auto images = std::make_shared<data::TensorDataset>(rand({64, 1, 8, 8}, {}, &gen),
                                                      zeros({64}, {.dtype = DType::Int64}));
  data::DataLoader calibration(images, {.batch_size = 32});
  const train::QuantizeResult q = train::quantize(*model, calibration, {.calibration_samples = 64});
  ASSERT_GT(q.layers, 0);
  TempRoot dir("saved_model_kinds");
  save_model(*model, {batch_of({1, 8, 8})}, dir / "int8", {.precision = "int8"});
  const SavedModel loaded = load_model(dir / "int8");
  EXPECT_EQ(loaded.info().precision, "int8");
  bool int8_weights = false;
  for (const graph::Capture& c : loaded.graph("serving_default").captures)
    int8_weights |= c.tensor.dtype() == DType::Int8;
  EXPECT_TRUE(int8_weights);
  for (int64_t batch : {1, 5}) {
    const Tensor x = rand({batch, 1, 8, 8}, {}, &gen);
    const Tensor want = [&] {
      NoGradGuard no_grad;
      return (*model)(x);
    }();
    expect_bit_identical(loaded({x})[0], want);
  }
}

// --- the committed bundle of format version 1 ---------------------------------------------------

// Note [saved model fixture]: tests/io/fixtures/saved_model_v1 is a bundle written by kiln 0.1.0
// (format version 1: the cond model above with fixed weights), and saved_model_v1.npz its input
// "x" and the output "y" it computed then. Later kilns must load it and compute y again (to
// float32 rounding: kernels may change their summation order, never the meaning). Regenerate it
// only for a new format version, beside (not over) the old one:
//   KILN_WRITE_FIXTURES=1 build/release/kiln_io_tests --gtest_filter='SavedModelFixture.*'
const fs::path kFixture = "tests/io/fixtures/saved_model_v1";

TEST(SavedModelFixture, AVersion1BundleKeepsLoading) {
  const std::string bundle = test::source_file(kFixture.string());
  if (std::getenv("KILN_WRITE_FIXTURES")) {
    Branchy model;
    randomize(*model.fc1, 21);
    randomize(*model.fc2, 22);
    save_model(
        {ExportedFunction{.function = traced(model), .output_names = {"y"}}}, bundle,
        {.assets = {{"README.txt", "The cond model of tests/io/test_saved_model_kinds.cpp\n"}},
         .metadata = {{"fixture", "saved_model_v1"}}});
    Generator gen(23);
    const Tensor x =
        cat({add(randn({3, 6}, {}, &gen), 2.0), add(randn({2, 6}, {}, &gen), -2.0)}, 0);
    // Row 0 has a negative mean: the else branch.
    const Tensor x_else =
        cat({add(randn({2, 6}, {}, &gen), -2.0), add(randn({3, 6}, {}, &gen), 2.0)}, 0);
    NoGradGuard no_grad;
    write_npz(bundle + ".npz",
              {{"x", x}, {"y", model({x})[0]}, {"x_else", x_else}, {"y_else", model({x_else})[0]}});
  }
  const SavedModel loaded = load_model(bundle);
  EXPECT_EQ(loaded.info().format_version, 1);
  EXPECT_EQ(loaded.info().producer, "kiln 0.1.0");
  EXPECT_EQ(loaded.info().metadata.value("fixture", ""), "saved_model_v1");
  EXPECT_EQ(loaded.asset("README.txt"), "The cond model of tests/io/test_saved_model_kinds.cpp\n");
  const NamedArrays arrays = read_npz(bundle + ".npz");
  ASSERT_EQ(arrays.size(), 4u);
  for (size_t i = 0; i < arrays.size(); i += 2) {
    SCOPED_TRACE(arrays[i].first);
    const std::vector<std::pair<std::string, Tensor>> out =
        loaded.run_named("serving_default", {{"x", arrays[i].second}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].first, "y");
    const Tensor& want = arrays[i + 1].second;
    ASSERT_EQ(out[0].second.shape(), want.shape());
    EXPECT_LE(max(abs(sub(out[0].second, want))).item<float>(), 1e-6f);
  }
}

}  // namespace
}  // namespace kiln::io
