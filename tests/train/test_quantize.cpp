// Post-training int8 quantization (kiln/train/quantize.h, Note [quantized layers]): a quantized
// model tracks its float one, its layers compute what their int8 state says, the state survives
// state_dict and checkpoints, and misuse is an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/kiln.h"
#include "kiln/nn/conv_bn.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

// Images [n, 1, 8, 8] in [0, 1) with random labels: what the small CNN's layers need to see.
std::shared_ptr<data::TensorDataset> images(int64_t n, uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<data::TensorDataset>(
      rand({n, 1, 8, 8}, {}, &gen), to_dtype(mul(rand({n}, {}, &gen), 9.99), DType::Int64));
}

// A small CNN whose batch norms hold running statistics that are not the identity.
std::shared_ptr<nn::Module> trained_cnn(uint64_t seed) {
  Generator gen(seed);
  auto model = nn::small_cnn(1, 10, 8);
  for (Tensor& p : model->parameters()) {
    NoGradGuard no_grad;
    p.copy_(mul(randn(p.shape(), {}, &gen), 0.3));
  }
  model->train();
  NoGradGuard no_grad;
  for (int i = 0; i < 5; ++i) (*model)(add(mul(rand({16, 1, 8, 8}, {}, &gen), 2.0), 0.5));
  model->eval();
  return model;
}

Tensor forward(nn::Module& m, const Tensor& x) {
  NoGradGuard no_grad;
  return m(x);
}

TEST(Quantize, TheInt8ModelTracksTheFloatOne) {
  auto model = trained_cnn(1);
  const Tensor x = images(64, 2)->data();
  const Tensor want = forward(*model, x);
  data::DataLoader calibration(images(200, 3), {.batch_size = 50});
  const train::QuantizeResult r =
      train::quantize(*model, calibration, {.calibration_samples = 200});
  EXPECT_EQ(r.calibration_samples, 200);
  EXPECT_EQ(r.layers, 4);  // conv1, conv2 (batch norms folded), fc1, fc2
  EXPECT_TRUE(r.details["conv1"]["folded_batch_norm"].get<bool>());
  EXPECT_FALSE(r.details["fc2"]["folded_batch_norm"].get<bool>());
  // The first layer sees images in [0, 1): unsigned; relu outputs are unsigned too.
  EXPECT_EQ(r.details["conv1"]["input_dtype"], "uint8");
  EXPECT_EQ(r.details["fc1"]["input_dtype"], "uint8");
  const Tensor got = forward(*model, x);
  ASSERT_EQ(got.shape(), want.shape());
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double max_abs = 0.0, max_err = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(static_cast<double>(w[i])));
    max_err = std::max(max_err, std::abs(static_cast<double>(g[i]) - w[i]));
  }
  // Without VNNI the weights are halved (Note [int8 without VNNI]): 7 bits instead of 8.
  const double bound = onednn_exact_int8() ? 0.05 : 0.08;
  EXPECT_LT(max_err, bound * max_abs) << "largest logit " << max_abs << " on " << onednn_cpu_isa();
  EXPECT_GT(max_err, 0.0);  // it did compute in int8
}

// A layer's int8 forward is exactly its ops on its state: quantize the input, then the int8
// convolution with the folded batch norm; and the state is what the formulas give.
TEST(Quantize, LayersComputeFromTheirInt8State) {
  auto model = trained_cnn(4);
  auto* cnn = dynamic_cast<nn::SmallCnn*>(model.get());
  ASSERT_NE(cnn, nullptr);
  data::DataLoader calibration(images(100, 5), {.batch_size = 100});
  train::quantize(*model, calibration, {.calibration_samples = 100});
  const nn::LayerQuantization& q = *cnn->conv1->quantization;
  ASSERT_TRUE(q.active && q.folded_batch_norm);
  // Weights: round(w * bn_scale / s_w) with s_w = max |w * bn_scale| / 127 per channel.
  auto [scale, shift] =
      conv_bn_fold(cnn->bn1->running_mean, cnn->bn1->running_var, cnn->bn1->weight, cnn->bn1->bias,
                   cnn->conv1->bias, cnn->bn1->options.eps);
  const Tensor folded =
      to_dtype(mul(cnn->conv1->weight, reshape(scale, {-1, 1, 1, 1})), DType::Float64);
  const std::vector<double> fw = folded.to_vector<double>();
  const std::vector<int64_t> wq = q.weight_q.to_vector<int64_t>();
  const std::vector<float> os = q.out_scale.to_vector<float>();
  const int64_t per = 9;
  for (int64_t o = 0; o < 32; ++o) {
    double amax = 0.0;
    for (int64_t i = 0; i < per; ++i) amax = std::max(amax, std::abs(fw[o * per + i]));
    EXPECT_FLOAT_EQ(os[o], static_cast<float>(q.input_scale * amax / 127.0));
    for (int64_t i = 0; i < per; ++i)
      EXPECT_EQ(wq[o * per + i],
                static_cast<int64_t>(std::nearbyint(fw[o * per + i] / (amax / 127.0))));
  }
  // The layer's forward is those ops.
  const Tensor x = images(4, 6)->data();
  NoGradGuard no_grad;
  const Tensor via_layer = nn::conv_bn(*cnn->conv1, *cnn->bn1, x, Tensor(), true);
  const Tensor by_hand =
      quantized_conv2d(quantize_per_tensor(x, q.input_scale, q.input_dtype), q.weight_q, q.bias_q,
                       q.out_scale, true, cnn->conv1->options);
  EXPECT_EQ(via_layer.to_vector<float>(), by_hand.to_vector<float>());
}

TEST(Quantize, StateSurvivesStateDictAndCheckpoints) {
  auto model = trained_cnn(7);
  data::DataLoader calibration(images(100, 8), {.batch_size = 25});
  const train::QuantizeResult r =
      train::quantize(*model, calibration, {.calibration_samples = 100});
  const Tensor x = images(8, 9)->data();
  const Tensor want = forward(*model, x);
  EXPECT_EQ(nn::quantization_spec(*model), r.spec);

  // Another float model of the same architecture, made int8 from the spec, then loaded.
  auto copy = nn::small_cnn(1, 10, 8);
  nn::prepare_quantized(*copy, r.spec);
  copy->load_state_dict(model->state_dict());
  copy->eval();
  EXPECT_EQ(forward(*copy, x).to_vector<float>(), want.to_vector<float>());

  test::TempDir dir("quantize_ckpt");
  optim::SGD opt(model->parameters(), {.lr = 0.0});
  train::save_checkpoint((dir.path() / "ckpt").string(), *model, opt, nullptr,
                         {.metadata = {{"quantization", r.spec}}});
  auto loaded = nn::small_cnn(1, 10, 8);
  nn::prepare_quantized(
      *loaded, train::read_checkpoint_metadata((dir.path() / "ckpt").string())["quantization"]);
  train::load_checkpoint_weights((dir.path() / "ckpt").string(), *loaded);
  loaded->eval();
  EXPECT_EQ(forward(*loaded, x).to_vector<float>(), want.to_vector<float>());

  // Without the spec, the quantized weights are unexpected keys.
  auto plain = nn::small_cnn(1, 10, 8);
  expect_error([&] { train::load_checkpoint_weights((dir.path() / "ckpt").string(), *plain); },
               {"weight_q"});
}

// Note [stripped float weights]: stripping changes no int8 output, empties exactly the float
// tensors only the float path reads, and the stripped state saves smaller and loads back into a
// model prepared from the spec, giving the same outputs.
TEST(Quantize, StrippedFloatWeightsSaveSmallerAndLoadBack) {
  auto model = trained_cnn(17);
  data::DataLoader calibration(images(100, 18), {.batch_size = 25});
  train::quantize(*model, calibration, {.calibration_samples = 100});
  const Tensor x = images(8, 19)->data();
  const Tensor want = forward(*model, x);
  auto bytes = [](const nn::StateDict& state) {
    int64_t n = 0;
    for (const auto& [name, t] : state) n += t.nbytes();
    return n;
  };
  const int64_t before = bytes(model->state_dict());

  std::vector<std::string> stripped = nn::strip_float(*model);
  std::sort(stripped.begin(), stripped.end());
  const nlohmann::json spec = nn::quantization_spec(*model);
  EXPECT_TRUE(spec.at("float_stripped").get<bool>());
  // Every quantized layer's weight and bias (where it has one), and each folded batch norm's
  // four tensors.
  std::set<std::string> has;
  for (const auto& [name, t] : nn::small_cnn(1, 10, 8)->state_dict()) has.insert(name);
  std::vector<std::string> expected;
  auto expect = [&](const std::string& name) {
    if (has.count(name)) expected.push_back(name);
  };
  for (const auto& [name, entry] : spec.at("layers").items()) {
    expect(name + ".weight");
    expect(name + ".bias");
    if (entry.at("folded_batch_norm").get<bool>())
      for (const char* t : {".weight", ".bias", ".running_mean", ".running_var"})
        expect(entry.at("batch_norm").get<std::string>() + t);
  }
  std::sort(expected.begin(), expected.end());
  ASSERT_GE(expected.size(), 8u);
  EXPECT_EQ(stripped, expected);
  EXPECT_EQ(forward(*model, x).to_vector<float>(), want.to_vector<float>());
  const int64_t after = bytes(model->state_dict());
  EXPECT_LT(after, before / 3) << before << " -> " << after;
  EXPECT_TRUE(nn::strip_float(*model).empty());  // nothing left to strip

  test::TempDir dir("quantize_stripped");
  optim::SGD opt(model->parameters(), {.lr = 0.0});
  const std::string ckpt = (dir.path() / "ckpt").string();
  train::save_checkpoint(ckpt, *model, opt, nullptr, {.metadata = {{"quantization", spec}}});
  auto loaded = nn::small_cnn(1, 10, 8);
  nn::prepare_quantized(*loaded, train::read_checkpoint_metadata(ckpt)["quantization"]);
  train::load_checkpoint_weights(ckpt, *loaded);
  loaded->eval();
  EXPECT_EQ(forward(*loaded, x).to_vector<float>(), want.to_vector<float>());
  // Prepared without the stripping, the file's empty tensors do not fit.
  nlohmann::json unstripped = spec;
  unstripped["float_stripped"] = false;
  auto mismatched = nn::small_cnn(1, 10, 8);
  nn::prepare_quantized(*mismatched, unstripped);
  expect_error([&] { train::load_checkpoint_weights(ckpt, *mismatched); }, {"shape"});

  // A folded convolution whose batch norm is not known by name cannot be stripped.
  auto by_hand = nn::small_cnn(1, 10, 8);
  for (const auto& [name, m] : by_hand->named_modules())
    if (dynamic_cast<nn::Conv2d*>(m) != nullptr) {
      nn::make_quantized(*m, DType::UInt8, 0.1, /*folded_batch_norm=*/true);
      break;
    }
  expect_error([&] { nn::strip_float(*by_hand); }, {"[strip_float]", "not known by name"});
  nlohmann::json bad = spec;
  bad["float_stripped"] = "yes";
  expect_error([&] { nn::prepare_quantized(*nn::small_cnn(1, 10, 8), bad); },
               {"[prepare_quantized]", "float_stripped"});
}

// A quantized model traces like any other (its int8 layers are ordinary ops): the graph, with a
// symbolic batch and every optimization pass, computes the eager int8 results exactly.
TEST(Quantize, AQuantizedModelTracesAndEqualsEager) {
  auto model = trained_cnn(21);
  data::DataLoader calibration(images(100, 22), {.batch_size = 50});
  train::quantize(*model, calibration, {.calibration_samples = 100});
  NoGradGuard no_grad;  // grad mode is part of the cache key: trace and run without gradients
  graph::Function traced = nn::function(model, {graph::TensorSpec({"batch", 1, 8, 8})});
  for (int64_t n : {1, 5, 16}) {
    const Tensor x = images(n, 23 + static_cast<uint64_t>(n))->data();
    EXPECT_EQ(traced({x})[0].to_vector<float>(), (*model)(x).to_vector<float>()) << "batch " << n;
  }
  EXPECT_EQ(traced.stats().traces, 1);
  int int8_nodes = 0;
  for (const graph::Node& node : traced.graphs()[0]->nodes)
    int8_nodes += std::string(node.op->name()).rfind("quantize", 0) == 0;
  EXPECT_GE(int8_nodes, 8) << "4 quantize_per_tensor + 4 quantized layers";
}

TEST(Quantize, PercentileClipsOutliersThatMinMaxKeeps) {
  // Inputs mostly in [0, 1) with one planted outlier of 50.
  std::vector<float> values = rand({400, 1, 8, 8}).to_vector<float>();
  values[123] = 50.0f;
  const Tensor data = tensor<float>(values, Shape{400, 1, 8, 8});
  auto ds = std::make_shared<data::TensorDataset>(data, zeros({400}, {.dtype = DType::Int64}));
  auto clip_of = [&](train::ObserverKind kind) {
    auto model = trained_cnn(10);
    data::DataLoader loader(ds, {.batch_size = 100});
    const train::QuantizeResult r =
        train::quantize(*model, loader, {.calibration_samples = 400, .observer = kind});
    return r.details["conv1"]["clip"].get<double>();
  };
  EXPECT_DOUBLE_EQ(clip_of(train::ObserverKind::kMinMax), 50.0);
  const double p = clip_of(train::ObserverKind::kPercentile);
  EXPECT_LT(p, 1.1);
  EXPECT_GT(p, 0.9);
}

TEST(Quantize, LayersThatSeeNoInputStayFloat) {
  // An MLP whose last layer is never called by this forward: only the first is quantized.
  struct Partial : nn::Module {
    std::shared_ptr<nn::Linear> a, unused;
    Partial() : nn::Module("Partial") {
      a = register_module("a", std::make_shared<nn::Linear>(64, 10));
      unused = register_module("unused", std::make_shared<nn::Linear>(10, 10));
    }
    Tensor forward(const Tensor& x) override { return (*a)(flatten(x, 1)); }
  } model;
  data::DataLoader loader(images(50, 11), {.batch_size = 50});
  const train::QuantizeResult r = train::quantize(model, loader, {.calibration_samples = 50});
  EXPECT_EQ(r.layers, 1);
  EXPECT_FALSE(r.details["unused"]["quantized"].get<bool>());
  EXPECT_EQ(model.unused->quantization, nullptr);
  EXPECT_EQ(r.spec["layers"].size(), 1u);
}

TEST(Quantize, MisuseIsAnError) {
  auto model = trained_cnn(12);
  data::DataLoader loader(images(50, 13), {.batch_size = 50});
  expect_error([&] { train::quantize(*model, loader, {.calibration_samples = 0}); },
               {"[quantize]", "calibration_samples >= 1"});
  expect_error(
      [&] { train::quantize(*model, loader, {.calibration_samples = 5, .percentile = 0.0}); },
      {"[quantize]", "percentile in (0, 100]"});
  expect_error([&] { train::parse_observer("entropy"); }, {"minmax, percentile", "entropy"});
  train::quantize(*model, loader, {.calibration_samples = 50});
  expect_error([&] { train::quantize(*model, loader, {.calibration_samples = 50}); },
               {"[quantize]", "already quantized"});
  auto* cnn = dynamic_cast<nn::SmallCnn*>(model.get());
  expect_error([&] { (*cnn->conv1)(images(1, 14)->data()); },
               {"[Conv2d]", "batch norm folded", "conv_bn"});
  auto fresh = nn::small_cnn(1, 10, 8);
  expect_error(
      [&] {
        nn::prepare_quantized(*fresh, {{"scheme", "int4"}});
      },
      {"[prepare_quantized]", "int8-symmetric"});
  nlohmann::json spec = nn::quantization_spec(*model);
  spec["layers"]["nope"] = spec["layers"]["fc1"];
  expect_error([&] { nn::prepare_quantized(*fresh, spec); }, {"\"nope\"", "lacks"});
  nlohmann::json bad = nn::quantization_spec(*model);
  bad["layers"]["fc1"]["input_scale"] = -1.0;
  expect_error([&] { nn::prepare_quantized(*nn::small_cnn(1, 10, 8), bad); },
               {"\"fc1\"", "input scale > 0"});
  bad = nn::quantization_spec(*model);
  bad["layers"]["fc1"].erase("input_dtype");
  expect_error([&] { nn::prepare_quantized(*nn::small_cnn(1, 10, 8), bad); },
               {"malformed", "\"fc1\""});
  // Calibration data that gives no batch.
  auto empty = std::make_shared<data::TensorDataset>(zeros({0, 1, 8, 8}),
                                                     zeros({0}, {.dtype = DType::Int64}));
  data::DataLoader none(empty, {.batch_size = 4});
  expect_error([&] { train::quantize(*trained_cnn(15), none); }, {"no batch"});
}

}  // namespace
}  // namespace kiln
