// Verified manifests (Note [verified manifest] in kiln/io/manifest.h): what seal_manifest writes
// reads back, and every kind of corruption of the manifest or of a file it lists is an error
// naming the file and the field or offset.
#include "kiln/io/manifest.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kiln/io/crc32.h"
#include "kiln/io/sha256.h"
#include "tests/io/temp_files.h"
#include "tests/support/test_util.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using test::error_of;
using test::expect_contains;
using namespace testing;  // kiln::io::testing: the temporary files

const ManifestFormat kFormat{.format = "kiln.bundle", .version = 3, .kind = "bundle"};

// A directory with weights.bin and the manifest.json that lists it.
class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_text(dir_ + "/weights.bin", weights_);
    const Json content = {{"name", "mlp"},
                          {"rng", {{"seed", 5}}},
                          {"files", {{"weights.bin", file_record_json(bytes_of(weights_))}}}};
    write_text(path_, seal_manifest(content, kFormat, dir_, "test_save"));
  }
  std::string read_error() {
    return error_of([&] { Manifest::read(path_, kFormat, "test_load"); });
  }
  // Rewrites the manifest with an edit and a valid checksum, so only the edit is under test.
  void resign(const std::function<void(Json&)>& edit) {
    Json j = Json::parse(read_text(path_));
    j.erase("crc32");
    edit(j);
    const std::string body = j.dump();
    j["crc32"] = ::crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size());
    write_text(path_, j.dump(2));
  }

  TempRoot tmp_{"manifest"};
  std::string dir_ = tmp_ / "b";
  std::string path_ = dir_ + "/manifest.json";
  std::string weights_ = "0123456789abcdef";
};

TEST_F(ManifestTest, SealedManifestReadsBack) {
  const Manifest m = Manifest::read(path_, kFormat, "test_load");
  EXPECT_EQ(m.path(), path_);
  EXPECT_FALSE(m.json().contains("crc32"));
  EXPECT_EQ(m.json()["format"], "kiln.bundle");
  EXPECT_EQ(m.json()["version"], 3);
  EXPECT_EQ(m.json()["name"], "mlp");
  EXPECT_EQ(m.unsigned_field(m.field(m.json(), "rng", "the bundle"), "seed", "\"rng\""), 5u);
  const FileRecord rec = m.file_record("weights.bin");
  EXPECT_EQ(rec.bytes, weights_.size());
  EXPECT_EQ(rec.crc32, ::crc32(0, reinterpret_cast<const Bytef*>(weights_.data()), 16));
  EXPECT_EQ(rec.sha256, "9f9f5111f7b27a781f1f1ddde5ebc2dd2b796bfc7365c9c28b548e564176929f");
  const std::vector<uint8_t> bytes = m.read_file(dir_, rec);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), weights_);
}

// The checksum is zlib's CRC-32 of the compact dump of the rest, so other tools can check it
// (and the checkpoints written before io/manifest existed still verify).
TEST_F(ManifestTest, ChecksumIsTheCrcOfTheCompactDump) {
  const std::string text = read_text(path_);
  EXPECT_TRUE(text.ends_with("}\n"));
  Json j = Json::parse(text);
  const uint32_t recorded = j["crc32"].get<uint32_t>();
  j.erase("crc32");
  const std::string body = j.dump();
  EXPECT_EQ(recorded, ::crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size()));
  EXPECT_EQ(text, [&] {
    j["crc32"] = recorded;
    return j.dump(2) + "\n";
  }());
}

TEST_F(ManifestTest, CorruptManifests) {
  write_text(path_, "{\"format\": \"kiln.bundle\", \"ver");
  expect_contains(read_error(), {"[test_load]", "manifest.json", "not valid JSON", "byte offset",
                                 "test_manifest.cpp"});
  write_text(path_, std::string(100000, '['));
  expect_contains(read_error(), {"manifest.json", "nested 100000 levels deep", "512"});
  write_text(path_, "[1]");
  expect_contains(read_error(), {"manifest.json", "expected a JSON object, but got array"});
  write_text(path_, "{\"format\": \"kiln.checkpoint\"}");
  expect_contains(read_error(), {"\"kiln.checkpoint\"", "not a kiln bundle"});
  write_text(path_, "{\"format\": \"kiln.bundle\"}");
  expect_contains(read_error(), {"expected the bundle to have the field \"version\""});
  fs::remove(path_);
  expect_contains(read_error(), {"[test_load]", "cannot open", "manifest.json"});
  write_text(path_, std::string(64, ' ') + "{}");
  ManifestFormat small = kFormat;
  small.max_bytes = 32;
  expect_contains(error_of([&] { Manifest::read(path_, small, "test_load"); }),
                  {"manifest.json", "66 bytes, more than the 32"});
}

TEST_F(ManifestTest, EditedManifestOrOtherVersion) {
  std::string text = read_text(path_);
  const size_t at = text.find("\"mlp\"");
  ASSERT_NE(at, std::string::npos);
  text[at + 1] = 'c';
  write_text(path_, text);
  expect_contains(read_error(), {"manifest.json", "CRC-32", "corrupt or edited"});
  SetUp();
  resign([](Json& j) { j["version"] = 4; });
  expect_contains(read_error(), {"expected format version 3, but got 4"});
  resign([](Json& j) { j["version"] = 3; });
  const Manifest m = Manifest::read(path_, kFormat, "test_load");
  expect_contains(error_of([&] { m.unsigned_field(m.json(), "name", "the bundle"); }),
                  {"[test_load]", "manifest.json", "\"name\" of the bundle", "\"mlp\""});
  expect_contains(error_of([&] { m.file_record("other.bin"); }),
                  {"expected \"files\" to have the field \"other.bin\""});
  resign([](Json& j) { j["files"]["weights.bin"]["crc32"] = uint64_t{1} << 32; });
  expect_contains(error_of([&] { Manifest::read(path_, kFormat, "x").file_record("weights.bin"); }),
                  {"\"crc32\" of weights.bin", "[0, 4294967295]"});
  Json unsigned_json = Json::parse(read_text(path_));
  unsigned_json.erase("crc32");
  write_text(path_, unsigned_json.dump());
  expect_contains(read_error(), {"expected the bundle to have the field \"crc32\""});
}

TEST_F(ManifestTest, ListedFileMustBeTheOneDescribed) {
  const Manifest m = Manifest::read(path_, kFormat, "test_load");
  const FileRecord rec = m.file_record("weights.bin");
  write_text(dir_ + "/weights.bin", weights_.substr(0, 10));
  expect_contains(error_of([&] { m.read_file(dir_, rec); }),
                  {"[test_load]", "weights.bin' is 10 bytes, but manifest.json records 16",
                   "truncated, or from another bundle", "test_manifest.cpp"});
  std::string flipped = weights_;
  flipped[3] ^= 0x10;
  write_text(dir_ + "/weights.bin", flipped);
  expect_contains(error_of([&] { m.read_file(dir_, rec); }),
                  {"weights.bin' has SHA-256", "but manifest.json records", "corrupt, edited"});
  fs::remove(dir_ + "/weights.bin");
  expect_contains(error_of([&] { m.read_file(dir_, rec); }),
                  {"cannot open", "weights.bin", "No such file"});
}

// `s` with the 4 bytes at `at` changed so that its CRC-32 is `want`. CRC-32 is affine over GF(2)
// in the message bits, and any 32 consecutive bits reach every checksum: so a deliberate edit
// can always be made to keep the recorded CRC-32 (and size). The content hash is what catches it.
std::string with_crc(std::string s, size_t at, uint32_t want) {
  const uint32_t base = io::crc32(s);
  std::array<std::pair<uint32_t, uint32_t>, 32> basis{};  // by leading bit: (effect, flipped bits)
  for (uint32_t b = 0; b < 32; ++b) {
    std::string t = s;
    t[at + b / 8] = static_cast<char>(t[at + b / 8] ^ (1 << (b % 8)));
    uint32_t v = io::crc32(t) ^ base, flips = uint32_t{1} << b;
    for (int bit = 31; bit >= 0 && v != 0; --bit) {
      if (!((v >> bit) & 1)) continue;
      if (basis[bit].first == 0) {
        basis[bit] = {v, flips};
        break;
      }
      v ^= basis[bit].first;
      flips ^= basis[bit].second;
    }
  }
  uint32_t need = base ^ want, flips = 0;
  for (int bit = 31; bit >= 0; --bit)
    if ((need >> bit) & 1) {
      EXPECT_NE(basis[bit].first, 0u);
      need ^= basis[bit].first;
      flips ^= basis[bit].second;
    }
  for (uint32_t b = 0; b < 32; ++b)
    if ((flips >> b) & 1) s[at + b / 8] = static_cast<char>(s[at + b / 8] ^ (1 << (b % 8)));
  return s;
}

TEST_F(ManifestTest, EditThatKeepsTheCrcIsCaughtByTheHash) {
  const Manifest m = Manifest::read(path_, kFormat, "test_load");
  const FileRecord rec = m.file_record("weights.bin");
  std::string forged = weights_;
  forged[0] = 'X';  // the edit a forger wants, then 4 bytes that restore the CRC-32
  forged = with_crc(forged, 8, rec.crc32);
  ASSERT_EQ(forged.size(), weights_.size());
  ASSERT_EQ(io::crc32(forged), rec.crc32);
  ASSERT_NE(forged, weights_);
  write_text(dir_ + "/weights.bin", forged);
  expect_contains(error_of([&] { m.read_file(dir_, rec); }),
                  {"weights.bin' has SHA-256 " + sha256_hex(forged),
                   "but manifest.json records " + rec.sha256});
}

// A record written before kiln recorded hashes (size and CRC-32 only) still reads, checked by its
// CRC-32; a hash that is not 64 lowercase hex digits is refused.
TEST_F(ManifestTest, RecordsWithoutAHashAreCheckedByTheirCrc) {
  resign([](Json& j) { j["files"]["weights.bin"].erase("sha256"); });
  const Manifest m = Manifest::read(path_, kFormat, "test_load");
  const FileRecord rec = m.file_record("weights.bin");
  EXPECT_TRUE(rec.sha256.empty());
  const std::vector<uint8_t> bytes = m.read_file(dir_, rec);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), weights_);
  std::string flipped = weights_;
  flipped[5] ^= 0x01;
  write_text(dir_ + "/weights.bin", flipped);
  expect_contains(error_of([&] { m.read_file(dir_, rec); }),
                  {"weights.bin' has CRC-32", "but manifest.json records", "corrupt"});
  for (const Json& bad : {Json("abc"), Json(std::string(64, 'F')), Json(7)}) {
    resign([&](Json& j) { j["files"]["weights.bin"]["sha256"] = bad; });
    expect_contains(
        error_of([&] { Manifest::read(path_, kFormat, "test_load").file_record("weights.bin"); }),
        {"\"sha256\" of weights.bin", "64 lowercase hex digits", bad.dump()});
  }
}

TEST(Manifest, SealRefusesInvalidUtf8) {
  expect_contains(error_of([] {
                    seal_manifest({{"name", "bad\xff"}}, kFormat, "out/b", "test_save");
                  }),
                  {"[test_save]", "bundle's JSON", "'out/b'", "valid UTF-8"});
}

}  // namespace
}  // namespace kiln::io
