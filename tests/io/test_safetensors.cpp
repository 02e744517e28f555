#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/shape_ops.h"
#include "tests/support/run_command.h"
#include "tests/support/source_file.h"
#include "tests/support/test_util.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using Named = std::vector<std::pair<std::string, Tensor>>;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// The raw bytes of a tensor in row-major order.
std::vector<uint8_t> bytes_of(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor c = contiguous(t);
  const uint8_t* p = static_cast<const uint8_t*>(c.raw_data());
  return {p, p + c.nbytes()};
}

using test::error_of;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_st_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }

  // One tensor of each dtype, with a scalar and an empty tensor, with exactly known values.
  static Named all_dtypes() {
    Generator gen(7);
    Tensor f32 = randn({3, 4}, {}, &gen);
    f32.data<float>()[0] = std::numeric_limits<float>::infinity();
    f32.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
    f32.data<float>()[2] = -0.0f;
    f32.data<float>()[3] = std::numeric_limits<float>::denorm_min();
    return {{"f32", f32},
            {"f64", randn({5}, TensorOptions{DType::Float64}, &gen)},
            {"f16", randn({2, 3}, TensorOptions{DType::Float16}, &gen)},
            {"bf16", randn({7}, TensorOptions{DType::BFloat16}, &gen)},
            {"i64", tensor<int64_t>({-(int64_t{1} << 62), -1, 0, int64_t{1} << 40}, Shape{2, 2})},
            {"i32", tensor<int32_t>({INT32_MIN, 0, INT32_MAX})},
            {"i8", tensor<int8_t>({-128, -1, 0, 1, 127})},
            {"u8", tensor<uint8_t>({0, 1, 128, 255, 7})},
            {"bool", tensor<bool>({true, false, false, true, true, false})},
            {"scalar", scalar_tensor(2.5, TensorOptions{DType::Float32})},
            {"empty", zeros({0, 3}, TensorOptions{DType::Float64})}};
  }

  static void expect_same(const Named& expected, const SafetensorsFile& got) {
    ASSERT_EQ(got.tensors.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      SCOPED_TRACE(expected[i].first);
      EXPECT_EQ(got.tensors[i].first, expected[i].first);
      const Tensor& t = got.tensors[i].second;
      EXPECT_EQ(t.dtype(), expected[i].second.dtype());
      EXPECT_EQ(t.shape(), expected[i].second.shape());
      EXPECT_TRUE(t.is_contiguous());
      EXPECT_EQ(bytes_of(t), bytes_of(expected[i].second));  // bit-exact, NaN and -0 included
    }
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDTypeBitExactInOrder) {
  Named tensors = all_dtypes();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}, {"", "empty key"}};
  save_safetensors(path("a.safetensors"), tensors, meta);
  SafetensorsFile f = load_safetensors(path("a.safetensors"));
  expect_same(tensors, f);
  EXPECT_EQ(f.metadata, meta);
  EXPECT_EQ(f.at("i32").to_vector<int64_t>(), (std::vector<int64_t>{INT32_MIN, 0, INT32_MAX}));
  EXPECT_EQ(files(), std::vector<std::string>{"a.safetensors"});  // no temp file left behind
}

TEST_F(SafetensorsTest, FileLayoutIsTheSafetensorsFormat) {
  Named tensors = {{"z", tensor<float>({1, 2, 3})},
                   {"a", tensor<uint8_t>({9})},
                   {"m", tensor<double>({4, 5}, Shape{1, 2})}};
  save_safetensors(path("b.safetensors"), tensors, {{"k", "v"}});
  std::vector<uint8_t> bytes = read_bytes(path("b.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  EXPECT_EQ(n % 8, 0u);
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<ptrdiff_t>(n));
  EXPECT_EQ(header.back(), ' ');  // padded with spaces
  auto json = nlohmann::ordered_json::parse(header);
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "z", "a", "m"}));  // order as given
  EXPECT_EQ(json["z"]["dtype"], "F32");
  EXPECT_EQ(json["z"]["data_offsets"], nlohmann::json({0, 12}));
  EXPECT_EQ(json["a"]["data_offsets"], nlohmann::json({12, 13}));
  EXPECT_EQ(json["m"]["shape"], nlohmann::json({1, 2}));
  EXPECT_EQ(json["m"]["data_offsets"], nlohmann::json({13, 29}));
  EXPECT_EQ(bytes.size(), 8 + n + 29);
  float second;
  std::memcpy(&second, bytes.data() + 8 + n + 4, 4);
  EXPECT_EQ(second, 2.0f);
  // Without metadata there is no __metadata__ key; in-memory bytes equal the file.
  save_safetensors(path("c.safetensors"), tensors);
  EXPECT_EQ(read_bytes(path("c.safetensors")), serialize_safetensors(tensors));
  EXPECT_EQ(read_bytes(path("c.safetensors")).size() % 8, 29u % 8);
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(read_bytes(path("c.safetensors")).data()) + 8, 9),
      "{\"z\":{\"dt");
}

TEST_F(SafetensorsTest, ViewsAreWrittenContiguous) {
  Tensor base = arange(24.0, TensorOptions{DType::Float32}).reshape({2, 3, 4});
  Named views = {{"transposed", base.transpose(0, 2)},
                 {"narrowed", base.narrow(2, 1, 2)},
                 {"selected", base.select(0, 1)},  // nonzero storage offset
                 {"expanded", tensor<int32_t>({1, 2, 3}).expand({4, 3})},
                 {"grad", ones({2}).set_requires_grad(true)}};
  save_safetensors(path("v.safetensors"), views);
  SafetensorsFile f = load_safetensors(path("v.safetensors"));
  expect_same(views, f);
  EXPECT_EQ(f.at("selected").to_vector<float>()[0], 12.0f);
  EXPECT_EQ(f.at("transposed").to_vector<float>()[1], 12.0f);
  EXPECT_FALSE(f.at("grad").requires_grad());
}

TEST_F(SafetensorsTest, EmptyFileListRoundTrips) {
  save_safetensors(path("e.safetensors"), {});
  SafetensorsFile f = load_safetensors(path("e.safetensors"));
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_EQ(read_bytes(path("e.safetensors")).size(), 16u);  // "{}" padded to 8
}

TEST_F(SafetensorsTest, WriterRejectsWhatCannotBeReadBack) {
  std::string p = path("w.safetensors");
  save_safetensors(p, {{"old", tensor<float>({1})}});
  std::vector<uint8_t> old = read_bytes(p);
  auto err = [&](const Named& t, std::map<std::string, std::string> meta = {}) {
    return error_of([&] { save_safetensors(p, t, meta); });
  };
  std::string dup = err({{"w", ones({1})}, {"w", ones({2})}});
  EXPECT_NE(dup.find("[save_safetensors]"), std::string::npos) << dup;
  EXPECT_NE(dup.find("\"w\" appears twice"), std::string::npos) << dup;
  EXPECT_NE(dup.find(p), std::string::npos) << dup;
  EXPECT_NE(dup.find("test_safetensors.cpp"), std::string::npos) << dup;
  std::string meta = err({{"m", empty({2, 3}, TensorOptions{}.with_device(kMeta))}});
  EXPECT_NE(meta.find("tensor \"m\" has no memory"), std::string::npos) << meta;
  EXPECT_NE(meta.find("float32[2, 3] on meta"), std::string::npos) << meta;
  EXPECT_NE(err({{"u", Tensor()}}).find("tensor \"u\" is undefined"), std::string::npos);
  EXPECT_NE(err({{"__metadata__", ones({1})}}).find("reserves"), std::string::npos);
  EXPECT_NE(err({{"bad\xff", ones({1})}}).find("valid UTF-8"), std::string::npos);
  EXPECT_NE(err({}, {{"k", "\xc3"}}).find("valid UTF-8"), std::string::npos);
  EXPECT_EQ(read_bytes(p), old);  // every rejection happened before the file was touched
  EXPECT_EQ(files(), std::vector<std::string>{"w.safetensors"});
}

TEST_F(SafetensorsTest, LoadErrorsNameTheFile) {
  std::string missing = error_of([&] { load_safetensors(path("nope.safetensors")); });
  EXPECT_NE(missing.find("[load_safetensors]"), std::string::npos) << missing;
  EXPECT_NE(missing.find("nope.safetensors"), std::string::npos) << missing;
  EXPECT_NE(missing.find("No such file"), std::string::npos) << missing;
  EXPECT_NE(missing.find("test_safetensors.cpp"), std::string::npos) << missing;
  std::string dir = error_of([&] { load_safetensors(dir_.string()); });
  EXPECT_NE(dir.find("it is a directory, expected a regular file"), std::string::npos) << dir;
  save_safetensors(path("x.safetensors"), {{"a", ones({1})}});
  std::string absent = error_of([&] { load_safetensors(path("x.safetensors")).at("b"); });
  EXPECT_NE(absent.find("expected a tensor named \"b\", but the file holds [\"a\"]"),
            std::string::npos)
      << absent;
}

TEST_F(SafetensorsTest, RejectsBoolBytesOtherThanZeroOrOne) {
  std::vector<uint8_t> bytes = serialize_safetensors({{"b", tensor<bool>({true, false})}});
  bytes.back() = 2;
  write_bytes(path("b.safetensors"), bytes);
  std::string msg = error_of([&] { load_safetensors(path("b.safetensors")); });
  EXPECT_NE(msg.find("tensor \"b\" of dtype BOOL has the byte 2 at file offset " +
                     std::to_string(bytes.size() - 1)),
            std::string::npos)
      << msg;
  msg = error_of([&] { parse_safetensors(bytes, "mem"); });
  EXPECT_NE(msg.find("[parse_safetensors] 'mem': tensor \"b\" of dtype BOOL"), std::string::npos)
      << msg;
}

// --- atomic writes ---------------------------------------------------------------------------

TEST_F(SafetensorsTest, InjectedFailureMidWriteKeepsThePreviousFile) {
  std::string p = path("ckpt.safetensors");
  save_safetensors(p, {{"w", full({4}, 1.0)}});
  std::vector<uint8_t> old = read_bytes(p);
  for (const char* step : {"open", "write", "fsync", "close", "rename"}) {
    SCOPED_TRACE(step);
    int writes = 0;
    ScopedAtomicFileFault fault([&](std::string_view s, const std::string& target) {
      EXPECT_EQ(target, p);
      if (s != step) return 0;
      // Fails the third write: the length and the header are already in the temp file.
      if (s == "write" && ++writes < 3) return 0;
      return ENOSPC;
    });
    std::string msg = error_of([&] { save_safetensors(p, {{"w", full({1000}, 2.0)}}); });
    EXPECT_NE(msg.find("[save_safetensors]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(ENOSPC)), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_safetensors.cpp"), std::string::npos) << msg;
    if (std::string(step) == "write") {
      EXPECT_EQ(writes, 3);
    }
    EXPECT_EQ(read_bytes(p), old);
    EXPECT_EQ(files(), std::vector<std::string>{"ckpt.safetensors"});  // temp removed
  }
  EXPECT_EQ(load_safetensors(p).at("w").to_vector<float>(), std::vector<float>(4, 1.0f));
}

TEST_F(SafetensorsTest, DirectorySyncFailureIsReportedAfterTheRename) {
  std::string p = path("d.safetensors");
  ScopedAtomicFileFault fault(
      [](std::string_view s, const std::string&) { return s == "fsync_dir" ? EIO : 0; });
  std::string msg = error_of([&] { save_safetensors(p, {{"w", ones({2})}}); });
  EXPECT_NE(msg.find("cannot flush its directory"), std::string::npos) << msg;
  EXPECT_EQ(files(), std::vector<std::string>{"d.safetensors"});
}

// A real (not injected) failure in the middle of writing: a file size limit makes write() fail
// with EFBIG after part of the data is written. Works as root too, unlike a read-only directory.
TEST_F(SafetensorsTest, RealWriteFailureKeepsThePreviousFile) {
  std::string p = path("big.safetensors");
  save_safetensors(p, {{"w", full({8}, 3.0)}});
  std::vector<uint8_t> old = read_bytes(p);
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto prev_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg = error_of([&] { save_safetensors(p, {{"w", full({100000}, 4.0)}}); });
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, prev_handler);
  EXPECT_NE(msg.find("cannot write '" + p + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::strerror(EFBIG)), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(p), old);
  EXPECT_EQ(files(), std::vector<std::string>{"big.safetensors"});
}

TEST_F(SafetensorsTest, UnwritableDirectoryKeepsThePreviousFile) {
  std::string p = path("ro.safetensors");
  save_safetensors(p, {{"w", ones({3})}});
  std::vector<uint8_t> old = read_bytes(p);
  std::string no_dir = error_of([&] { save_safetensors(path("no/such/dir.st"), {}); });
  EXPECT_NE(no_dir.find("cannot create the temporary file"), std::string::npos) << no_dir;
  EXPECT_NE(no_dir.find("no/such/dir.st"), std::string::npos) << no_dir;
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  std::string msg = error_of([&] { save_safetensors(p, {{"w", zeros({3})}}); });
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(p), old);
}

TEST_F(SafetensorsTest, AtomicFileDiscardsUncommittedWrites) {
  std::string p = path("raw.bin");
  write_file_atomic(p, std::vector<uint8_t>{1, 2, 3});
  {
    AtomicFile f(p);
    f.write(std::vector<uint8_t>{9, 9});
    EXPECT_EQ(f.temp_path(), p + ".tmp." + std::to_string(::getpid()));
    EXPECT_TRUE(fs::exists(f.temp_path()));
  }  // destroyed without commit, e.g. by an exception
  EXPECT_EQ(read_bytes(p), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(files(), std::vector<std::string>{"raw.bin"});
}

// --- PyTorch interop -------------------------------------------------------------------------

// Debian's interpreter (python3-torch); the first python3 on PATH does not see Debian's packages.
constexpr const char* kPython = "/usr/bin/python3";

// Single-quoted for the shell (the paths here never contain a quote).
std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

std::string script_path() {
  return quoted(test::source_file("tests/io/torch_interop.py"));
}

int run(const std::string& cmd, std::string& out) {
  return test::run_command(cmd, out);
}

void require_torch() {
  std::string out;
  if (run(std::string(kPython) + " -c 'import torch, numpy'", out) != 0)
    FAIL() << kPython << " cannot import torch and numpy; install Debian's python3-torch "
           << "(apt-get install python3-torch python3-numpy). Output:\n"
           << out;
}

// Values as the sidecar JSON carries them: exact doubles for floats, integers otherwise.
nlohmann::json values_json(const Tensor& t) {
  if (is_floating(t.dtype())) return t.to_vector<double>();
  return t.to_vector<int64_t>();
}

TEST_F(SafetensorsTest, TorchReadsWhatKilnWrites) {
  ASSERT_NO_FATAL_FAILURE(require_torch());
  Generator gen(3);
  Named tensors = {{"weight", randn({4, 3}, {}, &gen)},
                   {"bias", randn({3}, TensorOptions{DType::Float64}, &gen)},
                   {"half", randn({2, 2}, TensorOptions{DType::Float16}, &gen)},
                   {"bf", randn({5}, TensorOptions{DType::BFloat16}, &gen)},
                   {"steps", tensor<int64_t>({-(int64_t{1} << 60), 7, 0})},
                   {"i32", tensor<int32_t>({-5, 6})},
                   {"i8", tensor<int8_t>({-128, 127})},
                   {"u8", tensor<uint8_t>({0, 200, 255}, Shape{3, 1})},
                   {"mask", tensor<bool>({true, false, true})},
                   {"scalar", scalar_tensor(-1.25, TensorOptions{DType::Float64})},
                   {"none", zeros({2, 0})},
                   {"view", randn({3, 4}, {}, &gen).t()}};
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "caf\xc3\xa9"}};
  save_safetensors(path("k.safetensors"), tensors, meta);
  nlohmann::ordered_json side = {{"metadata", meta}, {"tensors", nlohmann::ordered_json::array()}};
  for (const auto& [name, t] : tensors)
    side["tensors"].push_back({{"name", name},
                               {"dtype", safetensors_dtype_name(t.dtype())},
                               {"shape", t.shape()},
                               {"values", values_json(t)}});
  std::ofstream(path("k.json")) << side.dump();
  std::string out;
  int rc = run(std::string(kPython) + " " + script_path() + " check " +
                   quoted(path("k.safetensors")) + " " + quoted(path("k.json")),
               out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK 12 tensors"), std::string::npos) << out;
}

TEST_F(SafetensorsTest, KilnReadsWhatTorchWrites) {
  ASSERT_NO_FATAL_FAILURE(require_torch());
  std::string out;
  int rc = run(std::string(kPython) + " " + script_path() + " write " +
                   quoted(path("t.safetensors")) + " " + quoted(path("t.json")),
               out);
  ASSERT_EQ(rc, 0) << out;
  SafetensorsFile f = load_safetensors(path("t.safetensors"));
  auto side = nlohmann::json::parse(std::ifstream(path("t.json")));
  EXPECT_EQ(f.metadata, side["metadata"].get<decltype(f.metadata)>());
  ASSERT_EQ(f.tensors.size(), side["tensors"].size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& want = side["tensors"][i];
    const auto& [name, t] = f.tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(name, want["name"]);  // header order, although the script stores data reversed
    EXPECT_EQ(safetensors_dtype_name(t.dtype()), want["dtype"].get<std::string>());
    EXPECT_EQ(t.shape(), want["shape"].get<Shape>());
    if (is_floating(t.dtype()))
      EXPECT_EQ(t.to_vector<double>(), want["values"].get<std::vector<double>>());
    else
      EXPECT_EQ(t.to_vector<int64_t>(), want["values"].get<std::vector<int64_t>>());
  }
  // Round trip through kiln keeps the bytes of every tensor.
  save_safetensors(path("t2.safetensors"), f.tensors, f.metadata);
  expect_same(f.tensors, load_safetensors(path("t2.safetensors")));
}

}  // namespace
}  // namespace kiln::io
