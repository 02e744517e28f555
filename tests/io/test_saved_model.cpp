// Saved-model bundles (Note [saved model] in kiln/io/saved_model.h): what a loaded bundle
// computes, what it records, and corrupt or hand-edited bundles, each of which must be a
// kiln::Error naming the file.
#include "kiln/io/saved_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/graph/function.h"
#include "kiln/io/crc32.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/saved_model_format.h"
#include "kiln/io/sha256.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/models.h"
#include "kiln/nn/traced.h"
#include "kiln/nn/transformer.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/unary.h"
#include "tests/io/temp_files.h"
#include "tests/io/zoo_cases.h"
#include "tests/support/test_util.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using graph::TensorSpec;
using Json = nlohmann::json;
using test::error_of;
using test::expect_bit_identical;
using test::expect_contains;
using test::expect_error;
using testing::read_text;
using testing::TempRoot;
using testing::write_text;
using testing::zoo_cases;
using testing::ZooCase;

// Random weights and running statistics, so that every saved tensor matters.
void randomize(nn::Module& m, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard no_grad;
  for (auto& [name, t] : m.state_dict()) {
    if (!is_floating(t.dtype())) continue;
    Tensor r = randn(t.shape(), TensorOptions{t.dtype()}, &gen);
    if (name.ends_with("running_var")) r = add(mul(abs(r), 0.5), 0.5);
    t.copy_(mul(r, name.ends_with("weight") ? 0.2 : 1.0));
  }
}

std::vector<Tensor> eager(nn::Module& m, const Tensor& x) {
  NoGradGuard no_grad;
  m.eval();
  return {m(x)};
}

std::shared_ptr<nn::Module> tiny_mlp() {
  auto m = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 5),
                                            std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(5, 3));
  randomize(*m, 3);
  return m;
}

// --- what a loaded bundle computes ----------------------------------------------------------

TEST(SavedModel, ZooModelsComputeWhatTheyComputedBeforeSaving) {
  const std::vector<ZooCase> cases = zoo_cases();
  TempRoot dir("saved_model");
  for (const ZooCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = c.make();
    randomize(*model, 11);
    std::vector<graph::Dim> sym = {graph::Dim{0, "batch"}};
    for (int64_t d : c.one) sym.push_back(graph::Dim{d, ""});
    save_model(*model, {TensorSpec(sym, DType::Float32, "x")}, dir / c.name);
    const SavedModel loaded = load_model(dir / c.name);
    Generator gen(5);
    for (int64_t batch : {1, 3}) {
      Shape shape = c.one;
      shape.insert(shape.begin(), batch);
      const Tensor x = randn(shape, {}, &gen);
      const std::vector<Tensor> want = eager(*model, x);
      const std::vector<Tensor> got = loaded({x});
      ASSERT_EQ(got.size(), 1u);
      expect_bit_identical(got[0], want[0]);
    }
    EXPECT_EQ(loaded.signature("serving_default").inputs[0].describe(),
              fmt::format("x: float32[-1 (batch), {}]", fmt::join(c.one, ", ")));
  }
}

TEST(SavedModel, RecordsSignaturesMetadataAndAssets) {
  TempRoot dir("saved_model");
  auto model = tiny_mlp();
  model->eval();
  // Two signatures over the same weights: the variables are stored once.
  const graph::Function logits =
      nn::function(*model, {TensorSpec({"batch", 6}, DType::Float32, "features")});
  const graph::Function probs = graph::function(
      [&](const std::vector<Tensor>& in) {
        const Tensor l = (*model)(in[0]);
        return std::vector<Tensor>{softmax(l, -1), argmax(l, -1)};
      },
      {TensorSpec({"n", 6}, DType::Float32, "x")},
      graph::FunctionOptions{.name = "probs", .capture_name = nn::state_names(*model)});
  SaveModelOptions options;
  options.assets = {{"classes.txt", "cat\ndog\nfox\n"}, {"data.json", "{\"mean\": 0.5}"}};
  options.metadata = {{"run", "fashion"}, {"epochs", 2}};
  save_model({{.signature = "serving_default", .function = logits, .output_names = {"logits"}},
              {.signature = "classify",
               .function = probs,
               .output_names = {"probabilities", "class"},
               .method = "classify"}},
             dir / "b", options);

  EXPECT_EQ(dir.entries(), std::vector<std::string>{"b"});  // nothing left beside it
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir / "b"))
    files.push_back(fs::relative(e.path(), dir / "b").string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"assets", "assets/classes.txt", "assets/data.json",
                                      "graphs.json", "saved_model.json", "variables.safetensors"}));
  EXPECT_EQ(load_safetensors(dir / "b/variables.safetensors").tensors.size(), 4u);

  const SavedModel m = load_model(dir / "b");
  EXPECT_EQ(m.info().producer, "kiln 0.1.0");
  EXPECT_EQ(m.info().precision, "float32");
  EXPECT_TRUE(std::regex_match(m.info().created, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << m.info().created;
  EXPECT_EQ(m.info().metadata, options.metadata);
  EXPECT_EQ(m.asset_names(), (std::vector<std::string>{"classes.txt", "data.json"}));
  EXPECT_EQ(m.asset("classes.txt"), "cat\ndog\nfox\n");
  ASSERT_EQ(m.signatures().size(), 2u);
  const SignatureDef& c = m.signature("classify");
  EXPECT_EQ(c.method, "classify");
  ASSERT_EQ(c.inputs.size(), 1u);
  EXPECT_EQ(c.inputs[0].describe(), "x: float32[-1 (n), 6]");
  ASSERT_EQ(c.outputs.size(), 2u);
  EXPECT_EQ(c.outputs[0].describe(), "probabilities: float32[-1 (n), 3]");
  EXPECT_EQ(c.outputs[1].describe(), "class: int64[-1 (n)]");
  EXPECT_EQ(m.signature("serving_default").outputs[0].name, "logits");

  const Tensor x = randn({4, 6});
  const std::vector<Tensor> want = eager(*model, x);
  expect_bit_identical(m({x})[0], want[0]);
  const auto named = m.run_named("classify", {{"x", x}});
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "probabilities");
  expect_bit_identical(named[0].second, probs({x})[0]);
  expect_bit_identical(named[1].second, argmax(want[0], -1));

  // Call errors name the signature, the input and what was expected.
  expect_error([&] { m.run("classify", {randn({4, 5})}); }, {"6", "5"});
  expect_error([&] { m.run("classify", {}); }, {"1"});
  expect_error([&] { m.run("nope", {x}); },
               {"[SavedModel]", "no signature 'nope'", "serving_default", "classify"});
  expect_error([&] { m.run_named("classify", {{"y", x}}); }, {"no input 'y'", "x"});
  expect_error([&] { m.run_named("classify", {}); },
               {"needs the input 'x' (x: float32[-1 (n), 6])"});
  expect_error([&] { m.run_named("classify", {{"x", x}, {"x", x}}); }, {"'x' is given twice"});
  expect_error([&] { m.asset("labels.txt"); }, {"no asset 'labels.txt'", "classes.txt"});
}

TEST(SavedModel, SavingKeepsTheModelsModes) {
  TempRoot dir("saved_model");
  auto model = std::make_shared<nn::SmallCnn>(1, 10, 28);
  model->train();
  nn::Module* bn = model->bn1.get();
  bn->eval();
  const std::string before = nn::mode_key(*model);
  save_model(*model, {TensorSpec({"batch", 1, 28, 28})}, dir / "cnn");
  EXPECT_EQ(nn::mode_key(*model), before);
  EXPECT_TRUE(model->is_training());
  EXPECT_FALSE(bn->is_training());
}

TEST(SavedModel, SaveRejectsBadRequests) {
  TempRoot dir("saved_model");
  auto model = tiny_mlp();
  const graph::Function f = nn::function(*model, {TensorSpec({"batch", 6}, DType::Float32, "x")});
  const graph::Function untraced = nn::function(model);
  auto save_error = [&](const std::vector<ExportedFunction>& fns, const SaveModelOptions& o,
                        const std::vector<std::string>& parts) {
    expect_error([&] { save_model(fns, dir / "b", o); }, parts);
  };
  save_error({}, {}, {"[save_model]", "no signatures", "test_saved_model.cpp"});
  save_error({{.function = f}, {.function = f}}, {}, {"'serving_default' is given twice"});
  save_error({{.signature = "", .function = f}}, {}, {"a signature name is empty"});
  save_error({{.function = untraced}}, {}, {"has not been traced", "nn::function(model, specs)"});
  save_error({{.function = f, .output_names = {"a", "b"}}}, {}, {"names 2 outputs", "returns 1"});
  save_error({{.function = f, .output_names = {"x"}}}, {}, {"two inputs or outputs called 'x'"});
  save_error({{.function = f}}, {.precision = "float8"}, {"unknown precision 'float8'", "int8"});
  for (const std::string bad : {"", ".", "..", "a/b"})
    save_error({{.function = f}}, {.assets = {{bad, "x"}}}, {"is not a plain file name"});
  save_error({{.function = f}}, {.metadata = Json::array()}, {"metadata to be a JSON object"});
  EXPECT_TRUE(dir.entries().empty());  // nothing written

  // An existing directory of something else is never replaced.
  fs::create_directories(dir / "mine");
  write_text(dir / "mine/notes.txt", "keep me");
  expect_error([&] { save_model({{.function = f}}, dir / "mine"); },
               {"refusing to replace", "notes.txt"});
  EXPECT_EQ(read_text(dir / "mine/notes.txt"), "keep me");
  // A bundle is replaced whole, also when the new one has fewer assets.
  save_model({{.function = f}}, dir / "b", {.assets = {{"a.txt", "1"}, {"b.txt", "2"}}});
  save_model({{.function = f}}, dir / "b", {.assets = {{"c.txt", "3"}}});
  EXPECT_EQ(load_model(dir / "b").asset_names(), std::vector<std::string>{"c.txt"});
  EXPECT_FALSE(fs::exists(dir / "b/assets/a.txt"));
}

// --- corrupt and hand-edited bundles --------------------------------------------------------

class SavedModelCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tiny_mlp();
    save_model(*model_, {TensorSpec({"batch", 6}, DType::Float32, "x")}, dir_,
               {.assets = {{"classes.txt", "a\nb\nc\n"}}});
  }
  std::string load_error() {
    return error_of([&] { load_model(dir_); });
  }
  std::string file(const std::string& name) { return dir_ + "/" + name; }
  // Edits the manifest (without its checksum) and seals it again with every listed file's
  // current size, CRC-32 and SHA-256: what a careful forger would do.
  void reseal(const std::function<void(Json&)>& edit = nullptr) {
    Json j = Json::parse(read_text(file("saved_model.json")));
    if (edit) edit(j);
    for (auto& [name, record] : j["files"].items()) {
      if (!fs::exists(file(name))) continue;
      const std::string bytes = read_text(file(name));
      record["bytes"] = bytes.size();
      record["crc32"] = crc32(std::string_view(bytes));
      if (record.contains("sha256")) record["sha256"] = sha256_hex(std::string_view(bytes));
    }
    write_text(file("saved_model.json"),
               seal_manifest(j, saved_model_format::manifest_format(), dir_, "test"));
  }
  void edit_graphs(const std::function<void(Json&)>& edit) {
    Json g = Json::parse(read_text(file("graphs.json")));
    edit(g);
    write_text(file("graphs.json"), g.dump());
    reseal();
  }

  TempRoot tmp_{"saved_model"};
  std::string dir_ = tmp_ / "bundle";
  std::shared_ptr<nn::Module> model_;
};

TEST_F(SavedModelCorrupt, IntactBundleLoads) {
  EXPECT_EQ(load_model(dir_).signatures().size(), 1u);
  reseal();  // resealing alone changes nothing
  EXPECT_EQ(load_model(dir_).signatures().size(), 1u);
}

TEST_F(SavedModelCorrupt, FlippedTruncatedOrMissingFiles) {
  for (const std::string name : {"graphs.json", "variables.safetensors", "assets/classes.txt"}) {
    SCOPED_TRACE(name);
    const std::string good = read_text(file(name));
    std::string bad = good;
    bad[bad.size() / 2] ^= 0x20;
    write_text(file(name), bad);
    expect_contains(load_error(), {"[load_model]", name, "SHA-256", "test_saved_model.cpp"});
    write_text(file(name), good.substr(0, good.size() - 1));
    expect_contains(load_error(), {name, "bytes"});
    fs::remove(file(name));
    expect_contains(load_error(), {name, "cannot open"});
    write_text(file(name), good);
  }
  EXPECT_EQ(load_model(dir_).signatures().size(), 1u);
  std::string text = read_text(file("saved_model.json"));
  text[text.find("\"float32\"") + 1] = 'F';
  write_text(file("saved_model.json"), text);
  expect_contains(load_error(), {"saved_model.json", "CRC-32", "corrupt or edited"});
  fs::remove_all(dir_);
  expect_contains(load_error(), {"no saved model at", "does not exist"});
}

TEST_F(SavedModelCorrupt, ForgedManifests) {
  auto expect_forged = [&](const std::function<void(Json&)>& edit,
                           const std::vector<std::string>& parts) {
    const std::string good = read_text(file("saved_model.json"));
    reseal(edit);
    expect_contains(load_error(), parts);
    write_text(file("saved_model.json"), good);
  };
  {
    // seal_manifest writes this build's version, so this one is sealed by hand.
    const std::string good = read_text(file("saved_model.json"));
    Json j = Json::parse(good);
    j.erase("crc32");
    j["version"] = 2;
    j["crc32"] = crc32(j.dump());
    write_text(file("saved_model.json"), j.dump(2));
    expect_contains(load_error(), {"expected format version 1, but got 2"});
    write_text(file("saved_model.json"), good);
  }
  expect_forged([](Json& j) { j["precision"] = "fp8"; }, {"unknown precision \"fp8\""});
  expect_forged([](Json& j) { j.erase("signatures"); }, {"\"signatures\""});
  expect_forged([](Json& j) { j["signatures"] = Json::object(); }, {"at least one signature"});
  expect_forged([](Json& j) { j["assets"] = {"../../etc/passwd"}; }, {"not a plain file name"});
  expect_forged(
      [](Json& j) {
        j["files"]["extra.bin"] = {{"bytes", 0}, {"crc32", 0}};
      },
      {"lists 'extra.bin', which is no part of a saved model"});
  expect_forged([](Json& j) { j["signatures"]["serving_default"]["inputs"][0]["shape"][1] = 7; },
                {"signature 'serving_default' input 0 is x: float32[-1 (batch), 7]",
                 "its graph's is float32[batch, 6]"});
  expect_forged([](Json& j) { j["signatures"]["serving_default"]["inputs"][0]["dtype"] = "int8"; },
                {"input 0 is x: int8"});
  expect_forged([](Json& j) { j["signatures"]["serving_default"]["inputs"][0]["shape"][1] = -3; },
                {"a static dim is a size >= 0"});
  expect_forged([](Json& j) { j["signatures"]["serving_default"]["outputs"] = Json::array(); },
                {"has 1 inputs and 0 outputs, but its graph has 1 and 1"});
  expect_forged([](Json& j) { j["signatures"]["serving_default"]["captures"][0] = "ghost"; },
                {"captures the variable 'ghost'", "variables.safetensors"});
  expect_forged(
      [](Json& j) {
        auto& caps = j["signatures"]["serving_default"]["captures"];
        std::swap(caps[0], caps[1]);  // weight <-> bias: shapes differ
      },
      {"graphs.json", "the graph of signature 'serving_default'", "capture"});
  expect_forged([](Json& j) { j["signatures"]["other"] = j["signatures"]["serving_default"]; },
                {"has no graph for the signature 'other'"});
}

TEST_F(SavedModelCorrupt, ForgedGraphsAndVariables) {
  edit_graphs([](Json& g) { g["graphs"]["serving_default"]["nodes"][0]["op"] = "no_such_op"; });
  expect_contains(load_error(), {"graphs.json", "serving_default", "no_such_op"});
  SetUp();
  edit_graphs([](Json& g) { g["graphs"]["extra"] = g["graphs"]["serving_default"]; });
  expect_contains(load_error(), {"holds the graph 'extra', which no signature names"});
  SetUp();
  edit_graphs([](Json& g) { g = Json::array(); });
  expect_contains(load_error(), {"graphs.json", "holds no"});
  SetUp();
  write_text(file("graphs.json"), std::string(5000, '['));
  reseal();
  expect_contains(load_error(), {"graphs.json", "nested 5000 levels deep"});
  write_text(file("graphs.json"), "{\"graphs\": {");
  reseal();
  expect_contains(load_error(), {"graphs.json", "not valid JSON"});
  SetUp();
  // A variable no signature uses.
  SafetensorsFile vars = load_safetensors(file("variables.safetensors"));
  vars.tensors.emplace_back("stowaway", zeros({2}));
  save_safetensors(file("variables.safetensors"), vars.tensors, vars.metadata);
  reseal();
  expect_contains(load_error(), {"variables.safetensors", "'stowaway'", "no signature captures"});
}

TEST_F(SavedModelCorrupt, FuzzedFilesLoadOrFailCleanly) {
  // Mutations of each file, resealed so that they reach the parsers behind the checksums: every
  // load must succeed or be a kiln::Error naming the bundle (ASan checks the rest in CI).
  std::mt19937 rng(2024);
  const std::vector<std::string> names = {"saved_model.json", "graphs.json",
                                          "variables.safetensors"};
  std::vector<std::string> good;
  for (const auto& n : names) good.push_back(read_text(file(n)));
  int errors = 0, loads = 0;
  std::vector<int> loaded_by_file(names.size());
  for (int iter = 0; iter < 300; ++iter) {
    const size_t which = static_cast<size_t>(iter) % names.size();
    std::string bytes = good[which];
    for (int e = 0, n = 1 + static_cast<int>(rng() % 3); e < n; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
          break;
        case 1:
          bytes[at] = "{}[]\",:0-9e"[rng() % 11];
          break;
        default:
          bytes.erase(at, 1 + rng() % 4);
          break;
      }
    }
    for (size_t i = 0; i < names.size(); ++i) write_text(file(names[i]), good[i]);
    write_text(file(names[which]), bytes);
    if (which != 0) reseal();
    try {
      const SavedModel m = load_model(dir_);
      ++loads;
      ++loaded_by_file[which];
      // A bundle that loads must run or fail cleanly too.
      try {
        m({randn({2, 6})});
      } catch (const Error&) {
      }
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(dir_), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a kiln::Error: " << e.what();
    }
  }
  EXPECT_EQ(errors + loads, 300);
  EXPECT_GT(errors, 150);
  std::printf("saved-model fuzz: %d mutated bundles, %d refused, %d loaded (%s %d, %s %d, %s %d)\n",
              300, errors, loads, names[0].c_str(), loaded_by_file[0], names[1].c_str(),
              loaded_by_file[1], names[2].c_str(), loaded_by_file[2]);
}

}  // namespace
}  // namespace kiln::io
