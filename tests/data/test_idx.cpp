#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/data/idx.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_idx_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<unsigned char>& bytes,
                    bool gzip = false) {
    std::string path = (dir_ / name).string();
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    return path;
  }

  // A 2x3 uint8 IDX file.
  static std::vector<unsigned char> small() {
    return {0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 255};
  }

  static std::string message_of(const std::string& path) {
    try {
      read_idx(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path dir_;
};

TEST_F(IdxTest, ReadsPlainUint8) {
  Tensor t = read_idx(write("a.idx", small()));
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::UInt8);
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 255}));
}

TEST_F(IdxTest, ReadsGzip) {
  Tensor t = read_idx(write("a.idx.gz", small(), true));
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 255}));
}

TEST_F(IdxTest, ReadsBigEndianInt32AndFloat) {
  std::vector<unsigned char> ints = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 1, 0, 0xFF, 0xFF, 0xFF, 0xFE};
  EXPECT_EQ(read_idx(write("i.idx", ints)).to_vector<int64_t>(), (std::vector<int64_t>{256, -2}));
  std::vector<unsigned char> floats = {0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3F, 0xC0, 0, 0};  // 1.5f
  EXPECT_EQ(read_idx(write("f.idx", floats)).to_vector<double>(), (std::vector<double>{1.5}));
}

TEST_F(IdxTest, TruncatedDataNamesFileAndOffset) {
  auto bytes = small();
  bytes.resize(bytes.size() - 2);
  std::string path = write("t.idx", bytes);
  std::string msg = message_of(path);
  EXPECT_NE(msg.find("[read_idx] truncated file"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("offset 16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_idx.cpp"), std::string::npos) << msg;
}

TEST_F(IdxTest, BadMagicIsAnError) {
  auto bytes = small();
  bytes[0] = 0x1F;
  EXPECT_NE(message_of(write("m.idx", bytes)).find("not an IDX file"), std::string::npos);
}

TEST_F(IdxTest, UnknownTypeIsAnError) {
  auto bytes = small();
  bytes[2] = 0x07;
  EXPECT_NE(message_of(write("u.idx", bytes)).find("unknown IDX element type 0x07"),
            std::string::npos);
}

TEST_F(IdxTest, TrailingBytesAreAnError) {
  auto bytes = small();
  bytes.push_back(9);
  EXPECT_NE(message_of(write("x.idx", bytes)).find("unexpected bytes after the data"),
            std::string::npos);
}

TEST_F(IdxTest, AbsurdHeaderIsRejectedBeforeAllocating) {
  std::vector<unsigned char> bytes = {0,    0,    0x08, 3,    0xFF, 0xFF, 0xFF, 0xFF,
                                      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  EXPECT_NE(message_of(write("h.idx", bytes)).find("implausibly large"), std::string::npos);
}

TEST_F(IdxTest, CorruptGzipIsAnErrorNotACrash) {
  std::string path = write("c.idx.gz", small(), true);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(12);
  const char junk[6] = {'\x13', '\x37', '\x42', '\x00', '\x7f', '\x55'};
  f.write(junk, sizeof(junk));
  f.close();
  EXPECT_THROW(read_idx(path), Error);
}

TEST_F(IdxTest, MissingFileNamesIt) {
  std::string msg = message_of((dir_ / "nope.gz").string());
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nope.gz"), std::string::npos) << msg;
}

TEST(IdxDataset, FashionMnistIfInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (!fs::exists(dir + "t10k-labels-idx1-ubyte.gz")) GTEST_SKIP() << "dataset not installed";
  Tensor labels = read_idx(dir + "t10k-labels-idx1-ubyte.gz");
  Tensor images = read_idx(dir + "t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(labels.shape(), (Shape{10000}));
  EXPECT_EQ(images.shape(), (Shape{10000, 28, 28}));
}

}  // namespace
}  // namespace kiln::data
