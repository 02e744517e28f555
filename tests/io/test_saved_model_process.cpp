// Bundles written by one process and run by another (Note [saved model]): this test starts a copy
// of its own program that builds the zoo models, saves each as a bundle and records inputs and
// the outputs eager execution computed (.npz); this process, which never builds a model, loads
// every bundle and must reproduce those outputs bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/io/npz.h"
#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "kiln/nn/traced.h"
#include "kiln/nn/transformer.h"
#include "tests/io/temp_files.h"
#include "tests/io/zoo_cases.h"
#include "tests/support/run_command.h"
#include "tests/support/test_util.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using graph::Dim;
using graph::TensorSpec;

constexpr const char* kWriteDir = "KILN_TEST_BUNDLE_WRITE_DIR";

void randomize(nn::Module& m, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard no_grad;
  for (Tensor& p : m.parameters()) p.copy_(mul(randn(p.shape(), {}, &gen), 0.2));
  // Running statistics that are not the identity (models without batch norms have none).
  for (auto& [name, t] : m.state_dict()) {
    if (name.ends_with("running_var")) t.copy_(add(rand(t.shape(), {}, &gen), 0.5));
    if (name.ends_with("running_mean")) t.copy_(mul(randn(t.shape(), {}, &gen), 0.1));
  }
  m.eval();
}

using testing::ZooCase;

// The zoo, and a bf16-autocast cnn.
std::vector<ZooCase> cases() {
  std::vector<ZooCase> all = testing::zoo_cases();
  all.push_back(
      {"cnn_bf16", [] { return nn::small_cnn(1, 10, 28); }, {1, 28, 28}, "bf16-autocast"});
  return all;
}

// The child: every case as DIR/NAME and DIR/NAME.npz ({"x", "y"}).
void write_bundles(const std::string& dir) {
  for (const ZooCase& c : cases()) {
    auto model = c.make();
    randomize(*model, 7);
    std::vector<Dim> dims = {Dim{0, "batch"}};
    for (int64_t d : c.one) dims.push_back(Dim{d, ""});
    const bool bf16 = c.precision == "bf16-autocast";
    NoGradGuard no_grad;
    const ExportedFunction f = [&] {
      std::optional<AutocastGuard> region;
      if (bf16) region.emplace(DType::BFloat16, AutocastOptions{.force = true});
      graph::FunctionOptions fo;
      fo.capture_name = nn::state_names(*model);
      return ExportedFunction{.function =
                                  nn::function(model, {TensorSpec(dims, DType::Float32, "x")}, fo)};
    }();
    save_model({f}, dir + "/" + c.name, {.precision = c.precision});
    Shape shape = c.one;
    shape.insert(shape.begin(), 3);
    Generator gen(9);
    const Tensor x = randn(shape, {}, &gen);
    std::optional<AutocastGuard> region;
    if (bf16) region.emplace(DType::BFloat16, AutocastOptions{.force = true});
    const Tensor y = (*model)(x);
    region.reset();
    write_npz(dir + "/" + c.name + ".npz", {{"x", x}, {"y", y.to(DType::Float32)}});
  }
}

TEST(SavedModelAcrossProcesses, ABundleRunsInAProcessThatNeverBuiltTheModel) {
  if (const char* dir = std::getenv(kWriteDir)) {
    write_bundles(dir);
    return;
  }
  testing::TempRoot root("saved_model_process");
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  std::string out;
  const int rc =
      test::run_command(fmt::format("{}='{}' '{}' --gtest_filter=SavedModelAcrossProcesses.*",
                                    kWriteDir, root.path().string(), self),
                        out);
  ASSERT_EQ(rc, 0) << out;
  for (const ZooCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const SavedModel loaded = load_model(root / c.name);
    EXPECT_EQ(loaded.info().precision, c.precision);
    const NamedArrays arrays = read_npz(root / (c.name + ".npz"));
    ASSERT_EQ(arrays.size(), 2u);
    NoGradGuard no_grad;
    const Tensor got = loaded({arrays[0].second})[0];
    test::expect_bit_identical(got.to(DType::Float32), arrays[1].second);
  }
}

}  // namespace
}  // namespace kiln::io
