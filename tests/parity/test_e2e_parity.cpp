// End-to-end training parity with PyTorch: kiln::nn::small_cnn() starts from the initial weights
// of the same network built in PyTorch (tests/parity/e2e_torch_reference.py), sees the same 20
// batches of 32 real Fashion-MNIST images, and trains 20 steps of SGD (lr 0.01, momentum 0.9) on
// cross_entropy in train mode. Every step's loss and the final weights and BatchNorm buffers are
// compared with PyTorch's, in float64 and in float32 (model and data in that dtype on both
// sides). The script writes the exchange files with a hand-written safetensors writer, so kiln's
// reader and load_state_dict(strict) are exercised on foreign files along the way.
//
// Note [e2e parity tolerances]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The issue asks for every loss within 1e-4 relative of PyTorch's. float64 holds that with ten
// orders of magnitude to spare (measured: 2e-14), so it is asserted for all 20 steps together
// with the final parameters and BatchNorm buffers within 1e-6 (scaled by max(1, |x|); measured
// 2e-13).
//
// float32 is subtler, because PyTorch 1.13's own float32 run is the less accurate of the two: its
// float32 conv2d drifts from its float64 run, and training amplifies any difference (at lr 0.05
// the gap grew ~2x per step, to 1.2e-2 by step 20, and a kiln float32 run with oneDNN's blocked
// convolutions drifted about as far, so lr 0.01 is used: the loss still falls from 2.42 to ~1.0).
// Measured at lr 0.01: kiln float32 stays within 2.4e-7 of PyTorch float64 at every step, while
// PyTorch float32 is 1.1e-4 away from its own float64 loss at step 18. So the float32 test asserts,
// at every step:
//   - kiln's float32 loss within 1e-4 relative of PyTorch's float64 loss (the exact reference:
//     kiln's float32 training is as accurate as the issue asks of it), and
//   - kiln's float32 loss within 1e-4 plus PyTorch's own float32 error at that step (its
//     float32-vs-float64 gap, doubled for margin) of PyTorch's float32 loss; for the first
//     kFloat32StrictSteps steps, before the drift builds up, simply within 1e-4;
// and the final float32 state within kFloat32WeightTolerance of PyTorch's float64 state (measured
// 9e-7) and within kFloat32TorchWeightTolerance of PyTorch's float32 state (that one absorbs
// PyTorch's drift; measured 1e-3).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/grad_mode.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/models.h"
#include "kiln/ops/loss.h"
#include "kiln/optim/sgd.h"
#include "tests/support/source_file.h"
#include "tests/support/temp_dir.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

// Debian's interpreter: the python3 first on PATH does not see python3-torch.
constexpr const char* kTorchPython = "/usr/bin/python3";
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kSteps = 20;
constexpr int64_t kBatch = 32;
constexpr double kLr = 0.01;
constexpr double kMomentum = 0.9;

constexpr double kLossTolerance = 1e-4;  // relative, per step (the figure)
constexpr double kFloat64WeightTolerance = 1e-6;
constexpr int64_t kFloat32StrictSteps = 4;
constexpr double kFloat32DriftFactor = 2.0;
constexpr double kFloat32WeightTolerance = 1e-2;
constexpr double kFloat32TorchWeightTolerance = 0.1;

std::string reference_script() {
  return test::source_file("tests/parity/e2e_torch_reference.py");
}

// Runs the PyTorch script into `dir`; on any failure returns the reason (empty on success).
std::string run_reference(const fs::path& dir, std::string& output) {
  if (!fs::exists(kTorchPython))
    return std::string("end-to-end parity needs ") + kTorchPython +
           " with Debian's PyTorch: apt-get install python3-torch python3-numpy";
  const std::string cmd = std::string(kTorchPython) + " '" + reference_script() + "' '" +
                          dir.string() + "' --data-dir '" + kFashionMnistDir + "' --steps " +
                          std::to_string(kSteps) + " --batch " + std::to_string(kBatch) + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return "could not run " + cmd;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  const int status = ::pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return "";
  return "the PyTorch reference failed (exit " + std::to_string(code) + "): " + cmd + "\n" +
         output +
         (code == 3 ? "" : "\n(if torch or numpy is missing: apt-get install python3-torch)");
}

struct KilnRun {
  std::vector<double> losses;
  nn::StateDict final_state;
};

// Trains kiln's small_cnn exactly as the script trains PyTorch's.
KilnRun train_kiln(const io::SafetensorsFile& exchange, DType dtype) {
  auto model = nn::small_cnn();
  model->to(dtype);
  nn::StateDict initial;
  for (const auto& [name, t] : exchange.tensors) {
    if (name.starts_with("data.")) continue;
    // Widening the exported float32 values to float64 is exact, as torch's model.to(float64).
    initial.emplace_back(name, is_floating(t.dtype()) ? t.to(dtype) : t);
  }
  model->load_state_dict(initial, /*strict=*/true);
  model->train();
  optim::SGD sgd(model->parameters(), optim::SGDOptions{.lr = kLr, .momentum = kMomentum});

  const Tensor images = exchange.at("data.images").to(dtype);
  const Tensor labels = exchange.at("data.labels");
  KilnRun run;
  for (int64_t step = 0; step < kSteps; ++step) {
    sgd.zero_grad();
    Tensor loss = cross_entropy((*model)(images.select(0, step)), labels.select(0, step));
    loss.backward();
    sgd.step();
    run.losses.push_back(loss.item());
  }
  run.final_state = model->state_dict();
  return run;
}

double relative(double got, double want) {
  return std::abs(got - want) / std::abs(want);
}

// max |got - want| / max(1, |want|) over the elements.
double max_scaled_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  if (g.size() != w.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - w[i]) / std::max(1.0, std::abs(w[i]));
    worst = std::max(worst, std::isnan(err) ? INFINITY : err);
  }
  return worst;
}

// The exchange and result files, produced once for the whole suite (the script takes seconds).
class E2eParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("e2e_parity");
    std::string output;
    error_ = run_reference(dir_->path(), output);
    if (!error_.empty()) return;
    exchange_ = new io::SafetensorsFile(io::load_safetensors(path("exchange.safetensors")));
    for (const char* tag : {"float64", "float32"})
      results_[tag] = io::load_safetensors(path(std::string("result_") + tag + ".safetensors"));
    std::printf("[ e2e    ] %s", output.c_str());
  }
  static void TearDownTestSuite() {
    delete exchange_;
    exchange_ = nullptr;
    results_.clear();
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& name) { return (dir_->path() / name).string(); }
  static std::vector<double> torch_losses(const std::string& tag) {
    return results_.at(tag).at("losses").to_vector<double>();
  }

  // Compares the final state key by key; returns the worst scaled error and checks `tolerance`.
  static double check_final_state(const KilnRun& run, const std::string& tag, double tolerance) {
    const io::SafetensorsFile& ref = results_.at(tag);
    EXPECT_EQ(run.final_state.size() + 1, ref.tensors.size());  // + "losses"
    double worst = 0;
    for (const auto& [name, t] : run.final_state) {
      const Tensor& want = ref.at(name);
      EXPECT_EQ(t.shape(), want.shape()) << name;
      const double err = max_scaled_error(t, want);
      EXPECT_LE(err, tolerance) << name << " after " << kSteps << " steps, vs PyTorch " << tag;
      worst = std::max(worst, err);
    }
    return worst;
  }

  static test::TempDir* dir_;
  static std::string error_;
  static io::SafetensorsFile* exchange_;
  static std::map<std::string, io::SafetensorsFile> results_;
};

test::TempDir* E2eParity::dir_ = nullptr;
std::string E2eParity::error_;
io::SafetensorsFile* E2eParity::exchange_ = nullptr;
std::map<std::string, io::SafetensorsFile> E2eParity::results_;

TEST_F(E2eParity, ExchangeFileHoldsTheInitialStateAndTheBatches) {
  ASSERT_TRUE(error_.empty()) << error_;
  EXPECT_EQ(exchange_->at("data.images").shape(), (Shape{kSteps, kBatch, 1, 28, 28}));
  EXPECT_EQ(exchange_->at("data.labels").shape(), (Shape{kSteps, kBatch}));
  EXPECT_EQ(exchange_->at("data.labels").dtype(), DType::Int64);
  // Real data is preferred; synthetic batches are the script's fallback without the dataset.
  if (fs::exists(fs::path(kFashionMnistDir) / "train-images-idx3-ubyte.gz")) {
    EXPECT_TRUE(exchange_->metadata.at("data_source").starts_with("fashion-mnist"))
        << exchange_->metadata.at("data_source");
  }
  // Every key of kiln's state_dict comes from PyTorch's (load_state_dict is strict, too).
  auto model = nn::small_cnn();
  for (const auto& [name, t] : model->state_dict()) {
    const Tensor& torch_t = exchange_->at(name);
    EXPECT_EQ(torch_t.shape(), t.shape()) << name;
    EXPECT_EQ(torch_t.dtype(), t.dtype()) << name;
  }
}

TEST_F(E2eParity, Float64LossesAndWeightsMatchTorchEveryStep) {
  ASSERT_TRUE(error_.empty()) << error_;
  const KilnRun run = train_kiln(*exchange_, DType::Float64);
  const std::vector<double> want = torch_losses("float64");
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  double worst = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    const double err = relative(run.losses[s], want[s]);
    EXPECT_LE(err, kLossTolerance)
        << "step " << s + 1 << ": kiln " << run.losses[s] << ", PyTorch " << want[s];
    worst = std::max(worst, err);
  }
  EXPECT_LT(want.back(), want.front());  // it trained
  const double weights = check_final_state(run, "float64", kFloat64WeightTolerance);
  std::printf("[ e2e    ] float64: worst loss relative difference %.3g, final state %.3g\n", worst,
              weights);
}

TEST_F(E2eParity, Float32LossesMatchTorchEveryStep) {
  ASSERT_TRUE(error_.empty()) << error_;
  const KilnRun run = train_kiln(*exchange_, DType::Float32);
  for (const auto& [name, t] : run.final_state) {
    if (name.find("num_batches_tracked") == std::string::npos) {
      EXPECT_EQ(t.dtype(), DType::Float32) << name;
    }
  }
  const std::vector<double> torch32 = torch_losses("float32");
  const std::vector<double> torch64 = torch_losses("float64");
  ASSERT_EQ(torch32.size(), static_cast<size_t>(kSteps));
  double worst32 = 0, worst64 = 0, worst_strict = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    const double vs64 = relative(run.losses[s], torch64[s]);
    EXPECT_LE(vs64, kLossTolerance) << "step " << s + 1 << ": kiln float32 " << run.losses[s]
                                    << ", PyTorch float64 " << torch64[s];
    const double vs32 = relative(run.losses[s], torch32[s]);
    const double torch_drift = relative(torch32[s], torch64[s]);
    const double bound = s < kFloat32StrictSteps
                             ? kLossTolerance
                             : kLossTolerance + kFloat32DriftFactor * torch_drift;
    EXPECT_LE(vs32, bound) << "step " << s + 1 << ": kiln float32 " << run.losses[s]
                           << ", PyTorch float32 " << torch32[s]
                           << " (PyTorch float32 vs float64: " << torch_drift << ")";
    worst32 = std::max(worst32, vs32);
    worst64 = std::max(worst64, vs64);
    if (s < kFloat32StrictSteps) worst_strict = std::max(worst_strict, vs32);
  }
  const double weights64 = check_final_state(run, "float64", kFloat32WeightTolerance);
  const double weights32 = check_final_state(run, "float32", kFloat32TorchWeightTolerance);
  std::printf(
      "[ e2e    ] float32: worst loss relative difference %.3g vs PyTorch float64, %.3g vs "
      "PyTorch float32 (%.3g over the first %lld steps); final state %.3g vs float64, %.3g vs "
      "float32\n",
      worst64, worst32, worst_strict, static_cast<long long>(kFloat32StrictSteps), weights64,
      weights32);
  for (int64_t s = 0; s < kSteps; ++s)
    std::printf(
        "[ e2e    ]   step %2lld  kiln f32 %.9f  torch f32 %.9f  torch f64 %.9f  kiln-vs-f64 %.2g  "
        "torch-f32-vs-f64 %.2g\n",
        static_cast<long long>(s + 1), run.losses[s], torch32[s], torch64[s],
        relative(run.losses[s], torch64[s]), relative(torch32[s], torch64[s]));
}

}  // namespace
}  // namespace kiln::train
