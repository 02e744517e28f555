// Note [deferred contents]: a storage whose contents are left to a producer's other form writes
// them exactly once, on the first data() call from any thread, and only then.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kiln/core/storage.h"

namespace kiln {
namespace {

// Fills the memory with `value` bytes and counts how often it was asked to.
class Fill final : public DeferredContents {
 public:
  Fill(size_t nbytes, unsigned char value, std::atomic<int>* calls)
      : nbytes_(nbytes), value_(value), calls_(calls) {}
  void write(void* data) const override {
    calls_->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // widen any race
    std::memset(data, value_, nbytes_);
  }

 private:
  size_t nbytes_;
  unsigned char value_;
  std::atomic<int>* calls_;
};

TEST(DeferredContents, WrittenOnceOnFirstAccess) {
  Storage s(64, kCPU);
  std::atomic<int> calls{0};
  auto fill = std::make_shared<Fill>(64, 7, &calls);
  s.defer(fill);
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(s.deferred(), fill);
  const auto* p = static_cast<const unsigned char*>(s.data());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(p[0], 7);
  EXPECT_EQ(p[63], 7);
  EXPECT_EQ(s.deferred(), nullptr);
  s.data();
  EXPECT_EQ(calls.load(), 1);
}

TEST(DeferredContents, ConcurrentReadersSeeOneWrite) {
  Storage s(1 << 16, kCPU);
  std::atomic<int> calls{0};
  s.defer(std::make_shared<Fill>(1 << 16, 3, &calls));
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int i = 0; i < 8; ++i)
    readers.emplace_back([&] {
      const auto* p = static_cast<const unsigned char*>(s.data());
      for (size_t j = 0; j < (1 << 16); j += 4096) wrong += p[j] != 3;
    });
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(wrong.load(), 0);
}

// A failed write leaves the contents deferred, so the next access tries again.
TEST(DeferredContents, FailedWriteIsRetried) {
  class Failing final : public DeferredContents {
   public:
    explicit Failing(std::atomic<int>* calls) : calls_(calls) {}
    void write(void* data) const override {
      if (calls_->fetch_add(1) == 0) throw std::runtime_error("first write fails");
      std::memset(data, 1, 8);
    }

   private:
    std::atomic<int>* calls_;
  };
  Storage s(8, kCPU);
  std::atomic<int> calls{0};
  s.defer(std::make_shared<Failing>(&calls));
  EXPECT_THROW(s.data(), std::runtime_error);
  EXPECT_NE(s.deferred(), nullptr);
  EXPECT_EQ(static_cast<const unsigned char*>(s.data())[7], 1);
  EXPECT_EQ(calls.load(), 2);
}

// Never read: the contents are dropped with the storage, unwritten.
TEST(DeferredContents, DroppedUnwrittenWithTheStorage) {
  std::atomic<int> calls{0};
  {
    Storage s(16, kCPU);
    s.defer(std::make_shared<Fill>(16, 1, &calls));
  }
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace kiln
