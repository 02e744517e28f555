// Every reader of a user-named file refuses a named pipe (and other special files) at once,
// naming the op, the file and the caller's line; none blocks waiting for a writer (Note [reading
// files] in kiln/io/regular_file.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "kiln/data/cifar.h"
#include "kiln/data/csv.h"
#include "kiln/data/idx.h"
#include "kiln/data/image.h"
#include "kiln/io/regular_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/checkpoint.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_contains;

class RegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_regular_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fifo_ = (dir_ / "pipe").string();
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0);
    // A reader that blocked in open() would hang the suite; this writer unblocks it after a few
    // seconds, so such a regression fails (the message check below) instead of hanging.
    watchdog_ = std::thread([this] {
      for (int i = 0; i < 100 && !done_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      while (!done_) {
        int fd = ::open(fifo_.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  void TearDown() override {
    done_ = true;
    watchdog_.join();
    fs::remove_all(dir_);
  }
  // The refusal every reader must give for the FIFO.
  void expect_refused(const std::string& msg, const std::string& op, int line) {
    expect_contains(msg, {"[" + op + "]", fifo_, "named pipe (FIFO)", "expected a regular file",
                          "test_regular_file.cpp:" + std::to_string(line)});
  }

  fs::path dir_;
  std::string fifo_;
  std::atomic<bool> done_{false};
  std::thread watchdog_;
};

TEST_F(RegularFileTest, SafetensorsRefusesAFifo) {
  const int line = __LINE__ + 1;
  expect_refused(error_of([&] { io::load_safetensors(fifo_); }), "load_safetensors", line);
}

TEST_F(RegularFileTest, IdxRefusesAFifo) {
  const int line = __LINE__ + 1;
  expect_refused(error_of([&] { data::read_idx(fifo_); }), "read_idx", line);
}

TEST_F(RegularFileTest, CifarRefusesAFifo) {
  const int line = __LINE__ + 1;
  std::string msg = error_of([&] { data::read_cifar10_batch(fifo_); });
  expect_contains(msg,
                  {fifo_, "not a regular file", "test_regular_file.cpp:" + std::to_string(line)});
}

TEST_F(RegularFileTest, CsvRefusesAFifo) {
  const int line = __LINE__ + 1;
  expect_refused(error_of([&] { data::read_csv(fifo_); }), "read_csv", line);
}

TEST_F(RegularFileTest, ImageRefusesAFifo) {
  const int line = __LINE__ + 1;
  expect_refused(error_of([&] { data::decode_image(fifo_); }), "decode_image", line);
}

TEST_F(RegularFileTest, CheckpointRefusesAFifo) {
  fs::create_directories(dir_ / "ckpt");
  const std::string manifest = (dir_ / "ckpt" / "checkpoint.json").string();
  ASSERT_EQ(::mkfifo(manifest.c_str(), 0600), 0);
  std::string msg = error_of([&] { train::read_checkpoint_state((dir_ / "ckpt").string()); });
  expect_contains(msg, {"checkpoint.json", "named pipe (FIFO)", "test_regular_file.cpp"});
}

TEST_F(RegularFileTest, CsvLoggerRefusesAFifoForAppendAndForWriting) {
  for (bool append : {true, false}) {
    train::CSVLogger logger(fifo_, append);
    std::string msg = error_of([&] { logger.on_train_begin(); });
    expect_contains(msg, {"[CSVLogger]", fifo_, "named pipe (FIFO)", "test_regular_file.cpp"});
  }
}

TEST_F(RegularFileTest, DirectoriesAndDevicesAreRefusedToo) {
  expect_contains(error_of([&] { io::read_regular_file(dir_.string(), "op", Loc::current()); }),
                  {"[op]", "it is a directory"});
  expect_contains(error_of([&] { io::read_regular_file("/dev/null", "op", Loc::current()); }),
                  {"it is a character device"});
  expect_contains(
      error_of([&] { io::read_regular_file((dir_ / "absent").string(), "op", Loc::current()); }),
      {"cannot open", "No such file"});
}

TEST_F(RegularFileTest, ReadsARegularFileWhole) {
  const std::string path = (dir_ / "f.bin").string();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("kiln", f);
    std::fclose(f);
  }
  std::vector<uint8_t> bytes = io::read_regular_file(path, "op", Loc::current());
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "kiln");
  expect_contains(error_of([&] { io::read_regular_file(path, "op", Loc::current(), 3); }),
                  {"is 4 bytes, more than the 3 expected"});
}

}  // namespace
}  // namespace kiln
