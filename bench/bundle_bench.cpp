// Saved-model bundles (issue 39, Note [saved model]): for ResNet-18 (3x32x32, 10 classes) in
// float32, bf16 autocast and int8 (train::quantize), the time to save and to load a bundle, its
// size, and a loaded bundle's first call (fresh process state: oneDNN primitives and weight
// caches made on the way) against warm calls, at batch 1 and 64. Medians; plain text.
//
//   build/release/bench/kiln_bundle_bench [--reps N] [--dir DIR]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/graph/executor.h"
#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "kiln/nn/traced.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <class F>
double median_seconds(int reps, F f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

graph::TensorSpec images_spec() {
  return graph::TensorSpec(
      {graph::Dim{0, "batch"}, graph::Dim{3, ""}, graph::Dim{32, ""}, graph::Dim{32, ""}},
      DType::Float32, "x");
}

std::shared_ptr<nn::Module> trained_like_resnet18() {
  auto model = nn::resnet18(3, 10);
  Generator gen(1);
  NoGradGuard no_grad;
  model->train();
  for (int i = 0; i < 3; ++i) (*model)(randn({16, 3, 32, 32}, {}, &gen));  // running statistics
  model->eval();
  return model;
}

io::ExportedFunction serving(const std::shared_ptr<nn::Module>& model, bool bf16) {
  NoGradGuard no_grad;
  std::optional<AutocastGuard> region;
  if (bf16) region.emplace(DType::BFloat16, AutocastOptions{.force = true});
  graph::FunctionOptions fo;
  fo.capture_name = nn::state_names(*model);
  return io::ExportedFunction{.function = nn::function(model, {images_spec()}, fo)};
}

uint64_t bundle_bytes(const io::SavedModel& m) {
  uint64_t bytes = 0;
  for (const io::FileRecord& f : m.info().files) bytes += f.bytes;
  return bytes + fs::file_size(fs::path(m.dir()) / "saved_model.json");
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::string root = (fs::temp_directory_path() / "kiln_bundle_bench").string();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc)
      root = argv[++i];
    else {
      std::fprintf(stderr, "usage: kiln_bundle_bench [--reps N] [--dir DIR]\n");
      return 2;
    }
  }
  fs::create_directories(root);
  std::printf("kiln_bundle_bench: %d threads, oneDNN isa %s, native bf16 %s; medians of %d\n",
              get_num_threads(), onednn_cpu_isa().c_str(),
              has_native_low_precision(DType::BFloat16) ? "yes" : "no", reps);
  std::printf("%-14s %8s %8s %8s %11s %10s %12s %11s %13s %14s\n", "precision", "size MB",
              "save ms", "load ms", "b1 first ms", "b1 warm ms", "b64 first ms", "b64 warm ms",
              "b1 unplanned", "b64 unplanned");
  Generator gen(2);
  const Tensor x1 = rand({1, 3, 32, 32}, {}, &gen), x64 = rand({64, 3, 32, 32}, {}, &gen);
  for (const std::string precision : {"float32", "bf16-autocast", "int8"}) {
    auto model = trained_like_resnet18();
    if (precision == "int8") {
      auto ds = std::make_shared<data::TensorDataset>(rand({64, 3, 32, 32}, {}, &gen),
                                                      zeros({64}, {.dtype = DType::Int64}));
      data::DataLoader calibration(ds, {.batch_size = 32});
      train::quantize(*model, calibration, {.calibration_samples = 64});
    }
    const io::ExportedFunction f = serving(model, precision == "bf16-autocast");
    const std::string dir = root + "/resnet18_" + precision;
    const double save_s =
        median_seconds(reps, [&] { io::save_model({f}, dir, {.precision = precision}); });
    std::optional<io::SavedModel> loaded;
    const double load_s = median_seconds(reps, [&] { loaded.emplace(io::load_model(dir)); });
    NoGradGuard no_grad;
    // First calls: each on a freshly loaded bundle (its weights are new tensors, so oneDNN's
    // weight reorders are made again), the b1 call first as a server's first request would be.
    std::vector<double> first1, first64;
    for (int r = 0; r < reps; ++r) {
      const io::SavedModel fresh = io::load_model(dir);
      auto t0 = Clock::now();
      fresh({x1});
      first1.push_back(seconds_since(t0));
      t0 = Clock::now();
      fresh({x64});
      first64.push_back(seconds_since(t0));
    }
    std::sort(first1.begin(), first1.end());
    std::sort(first64.begin(), first64.end());
    const double warm1 = median_seconds(std::max(reps, 20), [&] { (*loaded)({x1}); });
    const double warm64 = median_seconds(reps, [&] { (*loaded)({x64}); });
    // The same graph on the caching allocator alone (what SavedModel::run did before it had a
    // memory planner), timed right after, on the same warm machine.
    const graph::Graph& g = loaded->graph("serving_default");
    const double unplanned1 = median_seconds(std::max(reps, 20), [&] { graph::run(g, {x1}); });
    const double unplanned64 = median_seconds(reps, [&] { graph::run(g, {x64}); });
    std::printf("%-14s %8.1f %8.1f %8.1f %11.2f %10.2f %12.1f %11.1f %13.2f %14.1f\n",
                precision.c_str(), static_cast<double>(bundle_bytes(*loaded)) / 1e6, save_s * 1e3,
                load_s * 1e3, first1[first1.size() / 2] * 1e3, warm1 * 1e3,
                first64[first64.size() / 2] * 1e3, warm64 * 1e3, unplanned1 * 1e3,
                unplanned64 * 1e3);
  }
  fs::remove_all(root);
  return 0;
}
