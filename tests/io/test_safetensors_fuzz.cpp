// Robustness of the safetensors reader against corrupt and hostile files: every case must either
// load or throw kiln::Error; anything else (another exception, a crash, an out-of-bounds read under
// ASan) is a failure. Deterministic (fixed seeds) and bounded to well under 10 s even under ASan.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kiln/io/safetensors.h"
#include "kiln/ops/factories.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

enum class Outcome { kLoaded, kError };

// Copies into an allocation of exactly the case's size, so that ASan sees any read past its end.
Outcome try_parse(const Bytes& bytes, std::string* message = nullptr) {
  std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.size()]);
  if (!bytes.empty()) std::memcpy(exact.get(), bytes.data(), bytes.size());
  try {
    SafetensorsFile f = parse_safetensors({exact.get(), bytes.size()}, "fuzz.safetensors");
    // A file that loads must be self-consistent: its tensors re-serialize to a file that loads.
    Bytes again = serialize_safetensors(f.tensors, f.metadata);
    SafetensorsFile g = parse_safetensors(again, "again");
    EXPECT_EQ(g.tensors.size(), f.tensors.size());
    return Outcome::kLoaded;
  } catch (const Error& e) {
    if (message) *message = e.what();
    std::string what = e.what();
    EXPECT_NE(what.find("'fuzz.safetensors'"), std::string::npos) << what;
    return Outcome::kError;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a kiln::Error: " << typeid(e).name() << ": " << e.what();
  } catch (...) {
    ADD_FAILURE() << "unknown exception";
  }
  return Outcome::kError;
}

Bytes with_header(const std::string& header, const Bytes& data, std::optional<uint64_t> n = {}) {
  uint64_t len = n ? *n : header.size();
  Bytes out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(len >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Every dtype, with a scalar, an empty tensor and bools; small so that each case parses fast.
Bytes valid_file() {
  Generator gen(11);
  return serialize_safetensors({{"f32", randn({3, 4}, {}, &gen)},
                                {"f64", scalar_tensor(1.5, TensorOptions{DType::Float64})},
                                {"f16", randn({2, 3}, TensorOptions{DType::Float16}, &gen)},
                                {"bf16", zeros({0, 4}, TensorOptions{DType::BFloat16})},
                                {"i64", tensor<int64_t>({1, -2, 3, -4}, Shape{2, 2})},
                                {"i32", tensor<int32_t>({5, 6, 7})},
                                {"i8", tensor<int8_t>({-1, 2, -3, 4, -5})},
                                {"u8", tensor<uint8_t>({9, 8, 7})},
                                {"b", tensor<bool>({true, false, true, true, false})}},
                               {{"epoch", "3"}});
}

class SafetensorsFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    start_ = std::chrono::steady_clock::now();
    bytes_ = valid_file();
  }
  void TearDown() override {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::printf("  %zu cases: %zu loaded, %zu errors, %.3f s\n", loaded_ + errors_, loaded_,
                errors_, s);
  }
  void count(Outcome o) { (o == Outcome::kLoaded ? loaded_ : errors_)++; }

  Bytes bytes_;
  size_t loaded_ = 0, errors_ = 0;
  std::chrono::steady_clock::time_point start_;
};

TEST_F(SafetensorsFuzz, ValidFileLoads) {
  EXPECT_EQ(try_parse(bytes_), Outcome::kLoaded);
}

TEST_F(SafetensorsFuzz, EveryTruncationIsAnError) {
  for (size_t len = 0; len < bytes_.size(); ++len) {
    Outcome o = try_parse(Bytes(bytes_.begin(), bytes_.begin() + static_cast<ptrdiff_t>(len)));
    EXPECT_EQ(o, Outcome::kError) << "truncated to " << len;
    count(o);
  }
  // Extra bytes after the data are rejected too.
  for (size_t extra = 1; extra <= 16; ++extra) {
    Bytes longer = bytes_;
    longer.resize(bytes_.size() + extra, 0);
    EXPECT_EQ(try_parse(longer), Outcome::kError);
  }
}

// The file reader reads at offsets instead of from a buffer; it sees the same truncations.
TEST_F(SafetensorsFuzz, EveryTruncatedFileIsAnError) {
  fs::path dir = fs::temp_directory_path() / ("kiln_stfuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string p = (dir / "t.safetensors").string();
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes_.data()),
             static_cast<std::streamsize>(bytes_.size()));
  for (size_t len = bytes_.size() + 1; len-- > 0;) {
    ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(len)), 0);
    try {
      load_safetensors(p);
      EXPECT_EQ(len, bytes_.size());
      count(Outcome::kLoaded);
    } catch (const Error& e) {
      EXPECT_LT(len, bytes_.size()) << e.what();
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      count(Outcome::kError);
    } catch (...) {
      ADD_FAILURE() << "not a kiln::Error at length " << len;
    }
  }
  fs::remove_all(dir);
}

TEST_F(SafetensorsFuzz, RandomByteFlips) {
  std::mt19937_64 rng(20240601);
  std::uniform_int_distribution<size_t> pos(0, bytes_.size() - 1);
  std::uniform_int_distribution<int> bits(1, 255);
  for (int i = 0; i < 4000; ++i) {
    Bytes b = bytes_;
    int flips = i < 2000 ? 1 : 2 + i % 7;  // single, then 2..8 bytes at once
    for (int k = 0; k < flips; ++k) b[pos(rng)] ^= static_cast<uint8_t>(bits(rng));
    count(try_parse(b));
  }
  EXPECT_GT(loaded_, 0u);  // flips inside float data load fine
  EXPECT_GT(errors_, 0u);
}

// Every byte of the length and the header replaced by characters that JSON cares about.
TEST_F(SafetensorsFuzz, EveryHeaderByteReplaced) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes_[i];
  for (size_t at = 0; at < 8 + n; ++at) {
    for (uint8_t c : {'"', '}', '9', '\xff'}) {
      Bytes b = bytes_;
      b[at] = c;
      count(try_parse(b));
    }
  }
}

TEST_F(SafetensorsFuzz, AbsurdHeaderLengths) {
  Bytes data(bytes_.begin() + 8, bytes_.end());
  std::string header(bytes_.begin() + 8, bytes_.end());
  const uint64_t size_after = bytes_.size() - 8;
  struct Case {
    uint64_t n;
    const char* expected;
  };
  for (Case c : std::initializer_list<Case>{{uint64_t{1} << 63, "exceeds the limit"},
                                            {~uint64_t{0}, "exceeds the limit"},
                                            {uint64_t{1} << 32, "exceeds the limit"},
                                            {100'000'001, "exceeds the limit"},
                                            {size_after + 1, "runs past the end of the file"},
                                            {size_after + 1000, "runs past the end of the file"},
                                            {0, "not valid JSON"},
                                            {1, "not valid JSON"}}) {
    Bytes b = bytes_;
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(c.n >> (8 * i));
    std::string msg;
    EXPECT_EQ(try_parse(b, &msg), Outcome::kError) << c.n;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.n << ": " << msg;
    EXPECT_NE(msg.find("byte offset"), std::string::npos) << msg;
    count(Outcome::kError);
  }
  std::string msg;
  EXPECT_EQ(try_parse(Bytes{1, 2, 3}, &msg), Outcome::kError);
  EXPECT_NE(msg.find("3 bytes, shorter than the 8-byte header length"), std::string::npos) << msg;
}

TEST_F(SafetensorsFuzz, EachValidationRuleHasItsMessage) {
  fs::path dir = fs::temp_directory_path() / ("kiln_strules_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "bad.safetensors").string();
  const Bytes d8(8, 0);  // room for two F32 or one F64
  struct Case {
    std::string header;
    Bytes data;
    std::string expected;
  };
  const std::string ok = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<Case> cases = {
      {"", d8, "not valid JSON"},
      {"{", d8, "not valid JSON (error near byte offset 9"},
      {"{\"a\":1} x", d8, "not valid JSON"},
      {"{\"\xff\":1}", d8, "not valid JSON"},
      {"[1, 2]", d8, "the header is a JSON array, expected an object"},
      {"\"s\"", d8, "the header is a JSON string, expected an object"},
      {"{" + ok + "," + ok + "}", d8, "the key \"a\" twice"},
      {"{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", d8,
       "nests JSON deeper than 16"},
      {"{\"a\":[1]}", d8, "tensor \"a\": expected an object with keys"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", d8, "tensor \"a\": missing key \"data_offsets\""},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d8,
       "tensor \"a\": unexpected key \"x\""},
      {R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", d8,
       "tensor \"a\": expected \"dtype\" to be a string, but got 7"},
      {R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,8]}})", d8,
       "tensor \"a\": unknown dtype \"F8\""},
      {R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", d8, "unknown dtype \"f32\""},
      {R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", d8,
       "tensor \"a\": expected \"shape\" to be an array of non-negative integers, but got 2"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8,
       "array of non-negative integers, but got [-2]"},
      {R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8,
       "array of non-negative integers, but got [2.0]"},
      {R"({"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", d8, "non-negative integers"},
      {R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", d8,
       "non-negative integers"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", d8,
       "has more elements than fit in 64 bits"},
      {R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})",
       {},
       "has more elements than fit in 64 bits"},
      {R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", d8,
       "needs more bytes than fit in 64 bits"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8,
       "expected \"data_offsets\" to be [begin, end]"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", d8, "[begin, end]"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", d8, "[begin, end]"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":{"b":0}}})", d8, "[begin, end]"},
      {R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", d8,
       "data_offsets [8, 0] begin after they end"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d8,
       "data_offsets [0, 16] run past the end of the 8-byte data buffer"},
      {R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})",
       d8, "run past the end"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8,
       "tensor \"a\": dtype F32 and shape [3] need 12 bytes, but data_offsets [0, 8] hold 8"},
      {R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", d8, "need 8 bytes"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8,
       "bytes [0, 4) of the data buffer (file offsets"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
       d8, "bytes [4, 6) of the data buffer"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       d8, "tensor \"b\" (data_offsets [4, 8]) overlaps tensor \"a\" (data_offsets [0, 8])"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       d8, "overlaps"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
       d8, "overlaps"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8,
       "the data buffer has 8 bytes but the tensors cover only the first 4"},
      {"{}", d8, "cover only the first 0"},
      {R"({"__metadata__":[1]})", {}, "\"__metadata__\" is a JSON array, expected an object"},
      {R"({"__metadata__":{"k":1}})", {}, "\"__metadata__\" value of key \"k\" is a JSON number"},
      {R"({"__metadata__":{"k":{"x":"y"}}})", {}, "is a JSON object, expected a string"},
      {R"({"__metadata__":{"k":"v","k":"w"}})", {}, "the key \"k\" twice"},
      {R"({"__metadata__":{},"__metadata__":{}})", {}, "the key \"__metadata__\" twice"},
      {R"({"__format__":"x"})", {}, "unexpected reserved key \"__format__\""},
      {R"({"a":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}})", Bytes{0, 1, 0, 1, 0, 1, 0, 7},
       "tensor \"a\" of dtype BOOL has the byte 7 at file offset"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header.substr(0, 120));
    std::string msg;
    EXPECT_EQ(try_parse(with_header(c.header, c.data), &msg), Outcome::kError);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
    EXPECT_NE(msg.find("[parse_safetensors] 'fuzz.safetensors': "), std::string::npos) << msg;
    count(Outcome::kError);
    // The file reader gives the same message.
    Bytes bytes = with_header(c.header, c.data);
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    try {
      load_safetensors(file);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(c.expected), std::string::npos) << what;
      EXPECT_NE(what.find("[load_safetensors] '" + file + "': "), std::string::npos) << what;
    }
  }
  fs::remove_all(dir);
  // Control cases: the same building blocks, valid, load.
  struct Good {
    std::string header;
    Bytes data;
  };
  for (
      const Good& g : std::vector<Good>{
          {"{" + ok + "}", d8},
          {"  {" + ok + "}   \n\t ", d8},  // whitespace around the object is fine
          {R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)" + ok + "}", d8},
          {R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})", d8},
          {R"({"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
           d8},
          {R"({"__metadata__":{}})", {}},
          {"{}", {}}}) {
    SCOPED_TRACE(g.header);
    std::string msg;
    EXPECT_EQ(try_parse(with_header(g.header, g.data), &msg), Outcome::kLoaded) << msg;
    count(Outcome::kLoaded);
  }
  // Header order is kept even when the data is stored in another order.
  SafetensorsFile f =
      parse_safetensors(with_header(R"({"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
                                    R"("a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                                    {1, 0, 0, 0, 5, 6, 7, 8}),
                        "x");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "b");
  EXPECT_EQ(f.tensors[0].second.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(f.tensors[1].second.to_vector<int64_t>(), (std::vector<int64_t>{1}));
}

}  // namespace
}  // namespace kiln::io
