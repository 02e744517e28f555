#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/data/cifar.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kRecord = 3073;

// The pixel byte of record r (in its file) at channel c, row y, column x.
uint8_t pixel(int64_t r, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>((r * 31 + c * 7 + y * 3 + x) % 256);
}

std::vector<uint8_t> records(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> bytes;
  for (size_t r = 0; r < labels.size(); ++r) {
    bytes.push_back(labels[r]);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) bytes.push_back(pixel(static_cast<int64_t>(r), c, y, x));
  }
  return bytes;
}

class CifarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_cifar_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path.string();
  }

  static std::string message_of(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path dir_;
};

TEST_F(CifarTest, ReadsOneBatchFileAsChw) {
  Cifar10Batch b = read_cifar10_batch(write("test_batch.bin", records({0, 9, 3})));
  EXPECT_EQ(b.images.shape(), (Shape{3, 3, 32, 32}));
  EXPECT_EQ(b.images.dtype(), DType::UInt8);
  EXPECT_EQ(b.labels.dtype(), DType::Int64);
  EXPECT_EQ(b.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 9, 3}));
  auto px = b.images.to_vector<int64_t>();
  for (int64_t r : {0, 2})
    for (int64_t c = 0; c < 3; ++c)
      for (auto [y, x] : {std::pair<int64_t, int64_t>{0, 0}, {5, 17}, {31, 31}})
        EXPECT_EQ(px[((r * 3 + c) * 32 + y) * 32 + x], pixel(r, c, y, x)) << r << c << y << x;
}

TEST_F(CifarTest, TrainConcatenatesFiveBatchesAsFloat) {
  for (int k = 1; k <= 5; ++k)
    write("data_batch_" + std::to_string(k) + ".bin",
          records({static_cast<uint8_t>(k), static_cast<uint8_t>(k + 4)}));
  auto ds = cifar10(dir_.string(), "train");
  ASSERT_EQ(ds->size(), 10);
  EXPECT_EQ(ds->data().shape(), (Shape{10, 3, 32, 32}));
  EXPECT_EQ(ds->data().dtype(), DType::Float32);
  EXPECT_EQ(ds->target().to_vector<int64_t>(),
            (std::vector<int64_t>{1, 5, 2, 6, 3, 7, 4, 8, 5, 9}));
  // Record 1 of data_batch_3.bin is sample 5; its pixels are byte / 255.
  Example e = ds->get(5);
  EXPECT_FLOAT_EQ(e.data.select(0, 2).select(0, 4).select(0, 9).item<float>(),
                  pixel(1, 2, 4, 9) / 255.0f);
  auto u8 = cifar10(dir_.string(), "train", DType::UInt8);
  EXPECT_EQ(u8->data().dtype(), DType::UInt8);
  EXPECT_EQ(u8->get(5).data.select(0, 2).select(0, 4).select(0, 9).item<int64_t>(),
            pixel(1, 2, 4, 9));
}

TEST_F(CifarTest, TestSplitAndParentFolder) {
  write("cifar-10-batches-bin/test_batch.bin", records({4, 2}));
  auto ds = cifar10(dir_.string(), "test");
  EXPECT_EQ(ds->target().to_vector<int64_t>(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(cifar10((dir_ / "cifar-10-batches-bin").string(), "test")->size(), 2);
}

TEST_F(CifarTest, MissingFileIsNamed) {
  write("data_batch_1.bin", records({1}));
  write("data_batch_2.bin", records({1}));
  std::string msg = message_of([&] { cifar10(dir_.string(), "train"); });
  EXPECT_NE(msg.find("[cifar10] cannot open"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data_batch_3.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_cifar.cpp"), std::string::npos) << msg;
}

TEST_F(CifarTest, TruncatedFileNamesTheIncompleteRecordOffset) {
  auto bytes = records({1, 2, 3});
  bytes.resize(2 * kRecord + 100);
  std::string path = write("test_batch.bin", bytes);
  std::string msg = message_of([&] { read_cifar10_batch(path); });
  EXPECT_NE(msg.find("[read_cifar10_batch] truncated file"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 2 at byte offset 6146"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_cifar.cpp"), std::string::npos) << msg;
}

TEST_F(CifarTest, BadLabelNamesRecordAndOffset) {
  auto bytes = records({1, 2, 3});
  bytes[kRecord] = 10;
  std::string path = write("test_batch.bin", bytes);
  std::string msg = message_of([&] { read_cifar10_batch(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 1 at byte offset 3073 has label 10, expected 0..9"), std::string::npos)
      << msg;
}

TEST_F(CifarTest, EmptyFileAndBadArguments) {
  std::string path = write("test_batch.bin", {});
  EXPECT_NE(message_of([&] { read_cifar10_batch(path); }).find("is empty"), std::string::npos);
  EXPECT_NE(message_of([&] { cifar10(dir_.string(), "valid"); }).find("expected split"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              cifar10(dir_.string(), "test", DType::Int64);
            }).find("expected dtype float32 or uint8"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::data
