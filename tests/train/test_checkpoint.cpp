#include "kiln/train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/rng.h"
#include "kiln/data/dataset.h"
#include "kiln/data/loader.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/sha256.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/sgd.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_util.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using test::error_of;
using test::expect_contains;
using test::TempDir;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Edits checkpoint.json and re-signs it, so that only the edit itself is under test.
void rewrite_manifest(const std::string& dir, const std::function<void(Json&)>& edit) {
  const std::string path = dir + "/checkpoint.json";
  Json j = Json::parse(read_text(path));
  j.erase("crc32");
  edit(j);
  const std::string body = j.dump();
  j["crc32"] = ::crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size());
  write_text(path, j.dump(2));
}

// --- a small training setup in which randomness and buffers matter --------------------------

constexpr int64_t kSamples = 96;
constexpr int64_t kBatch = 16;

// Gaussian blobs of 3 classes in 6-D, with a random jitter keyed by the sample context, so the
// loader's epoch decides both the order and the augmentation.
std::shared_ptr<const data::Dataset> blobs() {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t i = 0; i < kSamples; ++i) {
    const int64_t label = i % 3;
    for (int64_t f = 0; f < 6; ++f) xs.push_back(normal(gen) + (f % 3 == label ? 1.5f : 0.0f));
    ys.push_back(label);
  }
  auto base = std::make_shared<data::TensorDataset>(kiln::tensor<float>(xs, Shape{kSamples, 6}),
                                                    kiln::tensor<int64_t>(ys));
  data::TensorTransform jitter = [](const Tensor& x, const data::SampleContext& ctx) {
    const auto bits = data::sample_bits(ctx);
    std::vector<float> v = x.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i)
      v[i] += 0.2f * static_cast<float>(data::uniform01(bits[i % 4]) - 0.5);
    return kiln::tensor<float>(v, x.shape());
  };
  return std::make_shared<data::TransformDataset>(base, jitter);
}

data::DataLoader make_loader(std::shared_ptr<const data::Dataset> ds) {
  return data::DataLoader(
      ds,
      data::DataLoaderOptions{.batch_size = kBatch, .shuffle = true, .num_workers = 2, .seed = 11});
}

enum class Recipe { AdamStepLR, SgdOneCycle };

struct Training {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LRScheduler> scheduler;
  Recipe recipe;
  int64_t step = 0;
};

// Fresh model, optimizer and scheduler; init_seed seeds the default generator first, so runs
// with different seeds start from different weights and generator states.
Training make_run(Recipe recipe, uint64_t init_seed) {
  kiln::manual_seed(init_seed);
  Training r;
  r.recipe = recipe;
  r.model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::BatchNorm1d>(16),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
      std::make_shared<nn::Linear>(16, 3));
  if (recipe == Recipe::AdamStepLR) {
    r.optimizer = std::make_unique<optim::Adam>(
        r.model->parameters(), optim::AdamOptions{.lr = 0.02, .weight_decay = 1e-3});
    r.scheduler = std::make_unique<optim::StepLR>(*r.optimizer, 1, 0.5);
  } else {
    r.optimizer = std::make_unique<optim::SGD>(
        r.model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
    r.scheduler = std::make_unique<optim::OneCycleLR>(
        *r.optimizer, optim::OneCycleLROptions{.max_lr = {0.2}, .total_steps = 13});
  }
  return r;
}

// One epoch of the plain loop; StepLR steps per epoch, OneCycleLR per batch.
void train_epoch(Training& r, data::DataLoader& loader) {
  r.model->train();
  for (const auto& batch : loader) {
    r.optimizer->zero_grad();
    Tensor loss = cross_entropy((*r.model)(batch.data), batch.target);
    loss.backward();
    r.optimizer->step();
    ++r.step;
    if (r.recipe == Recipe::SgdOneCycle) r.scheduler->step();
  }
  if (r.recipe == Recipe::AdamStepLR) r.scheduler->step();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

bool same_weights(const nn::Module& a, const nn::Module& b) {
  const nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  if (sa.size() != sb.size()) return false;
  for (size_t i = 0; i < sa.size(); ++i)
    if (sa[i].first != sb[i].first || !same_bits(sa[i].second, sb[i].second)) return false;
  return true;
}

struct ResumeResult {
  Training straight, resumed;
  Generator::State rng_straight{}, rng_resumed{};
};

void expect_bit_exact(const ResumeResult& r) {
  const Training &a = r.straight, &b = r.resumed;
  EXPECT_EQ(r.rng_straight.seed, r.rng_resumed.seed);
  EXPECT_EQ(r.rng_straight.offset, r.rng_resumed.offset);
  ASSERT_EQ(a.model->state_dict().size(), 9u);  // 2 linear x 2, batch norm's 2 + 3 buffers
  EXPECT_TRUE(same_weights(*a.model, *b.model));
  const optim::OptimizerState oa = a.optimizer->state_dict(), ob = b.optimizer->state_dict();
  EXPECT_EQ(oa.meta, ob.meta);
  ASSERT_FALSE(oa.tensors.empty());
  ASSERT_EQ(oa.tensors.size(), ob.tensors.size());
  for (const auto& [key, t] : oa.tensors) {
    ASSERT_TRUE(ob.tensors.count(key)) << key;
    EXPECT_TRUE(same_bits(t, ob.tensors.at(key))) << key;
  }
  EXPECT_EQ(a.scheduler->state_dict(), b.scheduler->state_dict());
  EXPECT_EQ(a.step, b.step);
}

// Trains 2 epochs straight (A) and 1 + save + fresh objects + load + 1 (B); B's second half runs
// on objects built from another seed, so everything that matters must come from the checkpoint.
// With perturb_rng the generator is reseeded after loading, to show the test can fail.
ResumeResult straight_and_resumed(Recipe recipe, const std::string& dir, bool perturb_rng) {
  auto ds = blobs();
  ResumeResult out;
  out.straight = make_run(recipe, 1);
  data::DataLoader loader_a = make_loader(ds);
  for (int epoch = 0; epoch < 2; ++epoch) train_epoch(out.straight, loader_a);
  out.rng_straight = default_generator().get_state();
  {
    Training first = make_run(recipe, 1);
    data::DataLoader loader_b = make_loader(ds);
    train_epoch(first, loader_b);
    save_checkpoint(dir, *first.model, *first.optimizer, first.scheduler.get(),
                    {.epoch = 1, .step = first.step, .metadata = {{"model", "blobs-mlp"}}});
  }
  out.resumed = make_run(recipe, 99);
  const CheckpointState st =
      load_checkpoint(dir, *out.resumed.model, *out.resumed.optimizer, out.resumed.scheduler.get());
  EXPECT_EQ(st.epoch, 1);
  EXPECT_EQ(st.metadata, Json({{"model", "blobs-mlp"}}));
  out.resumed.step = st.step;
  if (perturb_rng) kiln::manual_seed(5);
  data::DataLoader loader_c = make_loader(ds);
  loader_c.set_epoch(static_cast<uint64_t>(st.epoch));
  train_epoch(out.resumed, loader_c);
  out.rng_resumed = default_generator().get_state();
  return out;
}

TEST(Checkpoint, ResumeIsBitExactAdamStepLR) {
  TempDir tmp("resume_adam");
  const ResumeResult r = straight_and_resumed(Recipe::AdamStepLR, tmp / "ck", false);
  expect_bit_exact(r);
  EXPECT_EQ(r.straight.step, 2 * kSamples / kBatch);
}

TEST(Checkpoint, ResumeIsBitExactSgdOneCycle) {
  TempDir tmp("resume_sgd");
  const ResumeResult r = straight_and_resumed(Recipe::SgdOneCycle, tmp / "ck", false);
  expect_bit_exact(r);
}

// Control: the dropout masks really depend on the restored generator state.
TEST(Checkpoint, ResumeWithoutGeneratorStateDiverges) {
  TempDir tmp("resume_control");
  const ResumeResult r = straight_and_resumed(Recipe::AdamStepLR, tmp / "ck", true);
  EXPECT_FALSE(same_weights(*r.straight.model, *r.resumed.model));
}

// --- round trip -------------------------------------------------------------------------------

TEST(Checkpoint, RoundTripsMetadataSchedulerAndWeights) {
  TempDir tmp("roundtrip");
  Training a = make_run(Recipe::SgdOneCycle, 1);
  auto ds = blobs();
  data::DataLoader loader = make_loader(ds);
  train_epoch(a, loader);
  const Json meta = {{"model", "mlp"},
                     {"args", {"--epochs", "3", "--lr=0.1"}},
                     {"history", {{"loss", {1.25, 0.5, 0.1 + 0.2}}}},
                     {"note", "ünïcødé ✓"},
                     {"big", 18446744073709551615ull},
                     {"neg", -7}};
  save_checkpoint(tmp / "ck/", *a.model, *a.optimizer, a.scheduler.get(),
                  {.epoch = 1, .step = 6, .metadata = meta});
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"ck"});

  const CheckpointState st = read_checkpoint_state(tmp / "ck");
  EXPECT_EQ(st.epoch, 1);
  EXPECT_EQ(st.step, 6);
  EXPECT_EQ(st.metadata, meta);
  EXPECT_EQ(read_checkpoint_metadata(tmp / "ck"), meta);

  Training b = make_run(Recipe::SgdOneCycle, 2);
  load_checkpoint(tmp / "ck", *b.model, *b.optimizer, b.scheduler.get());
  EXPECT_EQ(b.scheduler->state_dict(), a.scheduler->state_dict());
  EXPECT_EQ(b.scheduler->get_last_lr(), a.scheduler->get_last_lr());
  EXPECT_EQ(b.optimizer->param_groups()[0].options, a.optimizer->param_groups()[0].options);
  EXPECT_TRUE(same_weights(*a.model, *b.model));

  // Inference-only loading needs neither optimizer nor scheduler (nor their file).
  Training c = make_run(Recipe::AdamStepLR, 3);
  const Generator::State before = default_generator().get_state();
  fs::remove(tmp / "ck/optimizer.safetensors");
  load_checkpoint_weights(tmp / "ck", *c.model);
  EXPECT_TRUE(same_weights(*a.model, *c.model));
  EXPECT_EQ(default_generator().get_state().offset, before.offset);

  // The model file is plain safetensors under the module's names.
  const io::SafetensorsFile f = io::load_safetensors(tmp / "ck/model.safetensors");
  ASSERT_EQ(f.tensors.size(), a.model->state_dict().size());
  for (const auto& [name, t] : a.model->state_dict()) EXPECT_TRUE(same_bits(f.at(name), t)) << name;
}

TEST(Checkpoint, SchedulerIsOptionalAtSaveAndAtLoad) {
  TempDir tmp("sched_optional");
  Training a = make_run(Recipe::AdamStepLR, 1);
  save_checkpoint(tmp / "with", *a.model, *a.optimizer, a.scheduler.get(), {});
  save_checkpoint(tmp / "without", *a.model, *a.optimizer, nullptr, {});
  Training b = make_run(Recipe::AdamStepLR, 2);
  load_checkpoint(tmp / "with", *b.model, *b.optimizer, nullptr);
  load_checkpoint(tmp / "without", *b.model, *b.optimizer, nullptr);
  const std::string msg = error_of(
      [&] { load_checkpoint(tmp / "without", *b.model, *b.optimizer, b.scheduler.get()); });
  expect_contains(msg, {"[load_checkpoint]", "checkpoint.json", "no LR scheduler state", "StepLR",
                        "test_checkpoint.cpp"});
}

// --- atomicity ---------------------------------------------------------------------------------

// The atomicity tests only care which epoch a load finds.
void save_at(const Training& r, const std::string& dir, int64_t epoch) {
  save_checkpoint(dir, *r.model, *r.optimizer, r.scheduler.get(), {.epoch = epoch});
}

int64_t loaded_epoch(const std::string& dir) {
  Training r = make_run(Recipe::AdamStepLR, 7);
  return load_checkpoint(dir, *r.model, *r.optimizer, r.scheduler.get()).epoch;
}

TEST(Checkpoint, FailedFileWriteKeepsThePreviousCheckpoint) {
  TempDir tmp("fail_write");
  const Training s = make_run(Recipe::AdamStepLR, 1);
  save_at(s, tmp / "ck", 1);
  {
    io::ScopedAtomicFileFault fault([](std::string_view step, const std::string& path) {
      return step == "write" && path.ends_with("optimizer.safetensors") ? ENOSPC : 0;
    });
    const std::string msg = error_of([&] { save_at(s, tmp / "ck", 2); });
    expect_contains(msg, {"[save_checkpoint]", "optimizer.safetensors", std::strerror(ENOSPC),
                          "test_checkpoint.cpp"});
  }
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"ck"});
  EXPECT_EQ(loaded_epoch(tmp / "ck"), 1);
}

TEST(Checkpoint, FailedDirectoryStepKeepsThePreviousCheckpoint) {
  for (const char* failing : {"mkdir", "rename_old", "rename_new"}) {
    SCOPED_TRACE(failing);
    TempDir tmp(std::string("fail_") + failing);
    const Training s = make_run(Recipe::AdamStepLR, 1);
    save_at(s, tmp / "ck", 1);
    set_checkpoint_fault_hook(
        [&](std::string_view step, const std::string&) { return step == failing ? EIO : 0; });
    const std::string msg = error_of([&] { save_at(s, tmp / "ck", 2); });
    set_checkpoint_fault_hook({});
    expect_contains(msg, {"[save_checkpoint]", std::strerror(EIO), "test_checkpoint.cpp"});
    EXPECT_EQ(tmp.entries(), std::vector<std::string>{"ck"});
    EXPECT_EQ(loaded_epoch(tmp / "ck"), 1);
    save_at(s, tmp / "ck", 3);  // and the next save works
    EXPECT_EQ(loaded_epoch(tmp / "ck"), 3);
  }
}

TEST(Checkpoint, LeftoverOldDirectoryIsHarmless) {
  TempDir tmp("fail_remove_old");
  const Training s = make_run(Recipe::AdamStepLR, 1);
  save_at(s, tmp / "ck", 1);
  set_checkpoint_fault_hook(
      [](std::string_view step, const std::string&) { return step == "remove_old" ? EBUSY : 0; });
  save_at(s, tmp / "ck", 2);  // complete once renamed: a stuck ck.old is not an error
  set_checkpoint_fault_hook({});
  EXPECT_EQ(tmp.entries(), (std::vector<std::string>{"ck", "ck.old"}));
  EXPECT_EQ(loaded_epoch(tmp / "ck"), 2);
  save_at(s, tmp / "ck", 3);
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"ck"});
  EXPECT_EQ(loaded_epoch(tmp / "ck"), 3);
}

// The states a kill can leave at each point of the protocol (see Note [checkpoint atomicity]),
// built by hand: the newest complete checkpoint must load, and the next save must clean up.
TEST(Checkpoint, EveryCrashPointLeavesALoadableCheckpoint) {
  TempDir tmp("crash");
  const Training s = make_run(Recipe::AdamStepLR, 1);
  const std::string ck = tmp / "ck";
  auto reset = [&] {
    for (const auto& e : tmp.entries()) fs::remove_all(tmp / e);
  };
  auto partial_tmp = [&] {
    fs::create_directory(ck + ".tmp-Ab12Cd");
    write_text(ck + ".tmp-Ab12Cd/model.safetensors", "half a fi");
    write_text(ck + ".tmp-Ab12Cd/model.safetensors.tmp.4242", "x");
  };
  auto save_then_recover = [&](int64_t want_loaded) {
    EXPECT_TRUE(checkpoint_exists(ck + "/"));
    EXPECT_EQ(loaded_epoch(ck), want_loaded);
    EXPECT_EQ(read_checkpoint_state(ck).epoch, want_loaded);
    save_at(s, ck, 9);
    EXPECT_EQ(tmp.entries(), std::vector<std::string>{"ck"});
    EXPECT_EQ(loaded_epoch(ck), 9);
  };

  {
    SCOPED_TRACE("killed while writing the temporary directory");
    reset();
    save_at(s, ck, 1);
    partial_tmp();
    save_then_recover(1);
  }
  {
    SCOPED_TRACE("killed between the two renames");
    reset();
    save_at(s, ck, 1);
    fs::rename(ck, ck + ".old");
    save_at(s, ck + ".tmp-Ab12Cd", 2);  // a complete, never promoted temporary
    save_then_recover(1);
  }
  {
    SCOPED_TRACE("killed before removing the old checkpoint");
    reset();
    save_at(s, ck, 2);
    save_at(s, ck + ".old", 1);
    save_then_recover(2);
  }
  {
    SCOPED_TRACE("killed while removing the old checkpoint");
    reset();
    save_at(s, ck, 2);
    save_at(s, ck + ".old", 1);
    fs::remove(ck + ".old/checkpoint.json");
    fs::remove(ck + ".old/optimizer.safetensors");
    save_then_recover(2);
  }
  {
    SCOPED_TRACE("killed during the very first save");
    reset();
    partial_tmp();
    const std::string msg = error_of([&] { read_checkpoint_state(ck); });
    expect_contains(msg, {"no checkpoint at", "ck'"});
    EXPECT_FALSE(checkpoint_exists(ck));
    save_at(s, ck, 9);
    EXPECT_EQ(tmp.entries(), std::vector<std::string>{"ck"});
  }
}

TEST(Checkpoint, RefusesToReplaceADirectoryWithOtherFiles) {
  TempDir tmp("foreign");
  fs::create_directory(tmp / "ck");
  write_text(tmp / "ck/notes.txt", "mine");
  const Training s = make_run(Recipe::AdamStepLR, 1);
  const std::string msg = error_of([&] { save_at(s, tmp / "ck", 1); });
  expect_contains(msg, {"[save_checkpoint]", "refusing to replace", "notes.txt"});
  EXPECT_EQ(read_text(tmp / "ck/notes.txt"), "mine");
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"ck"});
  fs::remove(tmp / "ck/notes.txt");  // an empty directory is fine
  save_at(s, tmp / "ck", 1);
  EXPECT_EQ(loaded_epoch(tmp / "ck"), 1);
}

// --- corrupt and mismatched checkpoints -----------------------------------------------------

class CheckpointCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    save_at(make_run(Recipe::AdamStepLR, 1), dir_, 1);
    kiln::manual_seed(123);
    fresh_ = make_run(Recipe::AdamStepLR, 2);
  }
  // The error of loading into fresh_, which must leave fresh_ and the generator unchanged.
  std::string load_error() {
    const nn::StateDict before = fresh_.model->state_dict();
    std::vector<Tensor> copies;
    for (const auto& [name, t] : before) copies.push_back(clone(t));
    const Json sched = fresh_.scheduler->state_dict();
    const Json opt = fresh_.optimizer->state_dict().meta;
    const Generator::State rng = default_generator().get_state();
    std::string msg = error_of(
        [&] { load_checkpoint(dir_, *fresh_.model, *fresh_.optimizer, fresh_.scheduler.get()); });
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_TRUE(same_bits(before[i].second, copies[i])) << before[i].first;
    EXPECT_EQ(fresh_.scheduler->state_dict(), sched);
    EXPECT_EQ(fresh_.optimizer->state_dict().meta, opt);
    EXPECT_EQ(default_generator().get_state().seed, rng.seed);
    EXPECT_EQ(default_generator().get_state().offset, rng.offset);
    return msg;
  }
  void rebuild(std::shared_ptr<nn::Sequential> model, std::unique_ptr<optim::Optimizer> opt) {
    fresh_.scheduler.reset();  // it refers to the optimizer
    fresh_.model = std::move(model);
    fresh_.optimizer = std::move(opt);
    fresh_.scheduler = std::make_unique<optim::StepLR>(*fresh_.optimizer, 1, 0.5);
  }
  void flip_byte(const std::string& file, int64_t from_end) {
    std::string bytes = read_text(dir_ + "/" + file);
    bytes[bytes.size() - static_cast<size_t>(from_end)] ^= 0x10;
    write_text(dir_ + "/" + file, bytes);
  }

  TempDir tmp_{std::string("corrupt_") +
               ::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string dir_ = tmp_ / "ck";
  Training fresh_;
};

TEST_F(CheckpointCorrupt, TruncatedModelFile) {
  const std::string path = dir_ + "/model.safetensors";
  fs::resize_file(path, fs::file_size(path) / 2);
  expect_contains(load_error(), {"[load_checkpoint]", "model.safetensors", "bytes", "truncated",
                                 "test_checkpoint.cpp"});
}

TEST_F(CheckpointCorrupt, BitFlips) {
  flip_byte("optimizer.safetensors", 5);
  expect_contains(load_error(), {"optimizer.safetensors", "SHA-256"});
  flip_byte("model.safetensors", 3);
  expect_contains(load_error(), {"model.safetensors", "SHA-256", "corrupt"});
  const std::string msg = error_of([&] { load_checkpoint_weights(dir_, *fresh_.model); });
  expect_contains(msg, {"[load_checkpoint_weights]", "model.safetensors", "SHA-256"});
}

TEST_F(CheckpointCorrupt, GarbageManifest) {
  write_text(dir_ + "/checkpoint.json", "{\"format\": \"kiln.checkpoint\", \"ver");
  expect_contains(load_error(), {"checkpoint.json", "not valid JSON", "byte offset"});
  write_text(dir_ + "/checkpoint.json", std::string("\x89PNG\r\n\x1a\n\0\0", 10));
  expect_contains(load_error(), {"checkpoint.json", "not valid JSON"});
  write_text(dir_ + "/checkpoint.json", std::string(200000, '['));
  expect_contains(load_error(), {"checkpoint.json", "nested"});
  write_text(dir_ + "/checkpoint.json", "[1, 2]");
  expect_contains(load_error(), {"checkpoint.json", "expected a JSON object"});
  write_text(dir_ + "/checkpoint.json", "{\"format\": \"safetensors\"}");
  expect_contains(load_error(), {"checkpoint.json", "not a kiln checkpoint"});
}

TEST_F(CheckpointCorrupt, EditedManifestOrOtherVersion) {
  std::string text = read_text(dir_ + "/checkpoint.json");
  const size_t at = text.find("\"epoch\": 1");
  ASSERT_NE(at, std::string::npos);
  text[at + 9] = '7';
  write_text(dir_ + "/checkpoint.json", text);
  expect_contains(load_error(), {"checkpoint.json", "CRC-32", "corrupt or edited"});
  rewrite_manifest(dir_, [](Json& j) { j["version"] = 2; });
  expect_contains(load_error(), {"checkpoint.json", "expected format version 1, but got 2"});
}

TEST_F(CheckpointCorrupt, MissingFieldsAndFiles) {
  rewrite_manifest(dir_, [](Json& j) { j.erase("rng"); });
  expect_contains(load_error(), {"checkpoint.json", "\"rng\""});
  rewrite_manifest(dir_, [](Json& j) { j["rng"] = {{"seed", -1}, {"offset", 0}}; });
  expect_contains(load_error(), {"checkpoint.json", "\"seed\""});
  rewrite_manifest(dir_, [](Json& j) { j["rng"] = {{"seed", 1}, {"offset", 0}}; });
  fs::remove(dir_ + "/optimizer.safetensors");
  expect_contains(load_error(), {"cannot open", "optimizer.safetensors", "No such file"});
  fs::remove(dir_ + "/checkpoint.json");
  expect_contains(load_error(), {"cannot open", "checkpoint.json"});
  fs::remove_all(dir_);
  expect_contains(load_error(), {"no checkpoint at", "does not exist"});
}

TEST_F(CheckpointCorrupt, FilesFromAnotherCheckpoint) {
  save_at(make_run(Recipe::AdamStepLR, 5), tmp_ / "other", 1);
  fs::copy_file(tmp_ / "other/model.safetensors", dir_ + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  expect_contains(load_error(), {"model.safetensors", "SHA-256", "another checkpoint"});
}

// A file that matches its recorded size and checksums but is not valid safetensors (say, written by
// a buggy tool) still meets the strict reader, never a crash.
TEST_F(CheckpointCorrupt, InvalidSafetensorsWithMatchingChecksum) {
  std::string bytes = read_text(dir_ + "/model.safetensors");
  bytes[0] = '\xff';
  bytes[7] = '\x7f';  // a header length far beyond the file
  write_text(dir_ + "/model.safetensors", bytes);
  rewrite_manifest(dir_, [&](Json& j) {
    j["files"]["model.safetensors"]["crc32"] =
        ::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
    j["files"]["model.safetensors"]["sha256"] = io::sha256_hex(bytes);
  });
  expect_contains(load_error(), {"model.safetensors", "header length"});
}

TEST_F(CheckpointCorrupt, ModelKeysMismatch) {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 16),
                                                std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(16, 4));
  rebuild(model, std::make_unique<optim::Adam>(model->parameters()));
  expect_contains(load_error(), {"[load_checkpoint]", "model.safetensors", "does not fit the model",
                                 "unexpected keys", "1.running_mean", "missing keys", "2.weight",
                                 "test_checkpoint.cpp"});
  const std::string msg = error_of([&] { load_checkpoint_weights(dir_, *fresh_.model); });
  expect_contains(msg, {"[load_checkpoint_weights]", "does not fit the model", "4.weight"});
}

TEST_F(CheckpointCorrupt, OptimizerOrSchedulerMismatch) {
  fresh_.scheduler = std::make_unique<optim::ExponentialLR>(*fresh_.optimizer, 0.9);
  expect_contains(load_error(), {"checkpoint.json", "does not fit the ExponentialLR", "StepLR"});

  std::vector<Tensor> params = fresh_.model->parameters();
  params.pop_back();
  rebuild(fresh_.model, std::make_unique<optim::Adam>(params));
  expect_contains(load_error(),
                  {"[load_checkpoint]", "optimizer.safetensors", "does not fit the optimizer",
                   "expected group 0 to have 5 parameters, but got 6", "test_checkpoint.cpp"});
  rebuild(fresh_.model,
          std::make_unique<optim::SGD>(fresh_.model->parameters(), optim::SGDOptions{.lr = 0.1}));
  expect_contains(load_error(), {"does not fit the optimizer", "Adam", "SGD"});
}

}  // namespace
}  // namespace kiln::train
