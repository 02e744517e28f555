#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/data/pipeline.h"
#include "kiln/ops/factories.h"

namespace kiln::data {
namespace {

std::shared_ptr<TensorDataset> numbers(int64_t n) {
  return std::make_shared<TensorDataset>(
      arange(static_cast<double>(n), TensorOptions{DType::Int64}));
}

std::vector<int64_t> values(const std::vector<Example>& xs) {
  std::vector<int64_t> out;
  for (const auto& e : xs)
    for (int64_t v : e.data.to_vector<int64_t>()) out.push_back(v);
  return out;
}

TEST(DataPipeline, MapFilterTakeSkip) {
  auto p = Pipeline::from_dataset(numbers(10))
               .filter([](const Example& e) { return e.data.item<int64_t>() % 2 == 0; })
               .map([](Example e) {
                 e.data = full(Shape{}, 10.0 * e.data.item<double>(), TensorOptions{DType::Int64});
                 return e;
               })
               .skip(1)
               .take(3);
  EXPECT_EQ(values(p.collect()), (std::vector<int64_t>{20, 40, 60}));
  // A pipeline is a recipe: a second pass gives the same result.
  EXPECT_EQ(values(p.collect()), (std::vector<int64_t>{20, 40, 60}));
}

TEST(DataPipeline, BatchAndRepeat) {
  auto p = Pipeline::from_dataset(numbers(5)).repeat(2).batch(4);
  auto batches = p.collect();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].data.shape(), (Shape{4}));
  EXPECT_EQ(batches[2].data.shape(), (Shape{2}));
  EXPECT_EQ(values(batches), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  EXPECT_EQ(Pipeline::from_dataset(numbers(5)).batch(2, true).collect().size(), 2u);
  // repeat() forever, bounded by take().
  EXPECT_EQ(Pipeline::from_dataset(numbers(3)).repeat().take(7).collect().size(), 7u);
  // An empty source must not make repeat() spin.
  EXPECT_TRUE(Pipeline::from_examples({}).repeat().collect().empty());
}

TEST(DataPipeline, ShuffleIsSeededPermutationAndReshufflesPerPass) {
  auto p = Pipeline::from_dataset(numbers(50)).shuffle(16, 7);
  auto a = values(p.collect());
  auto b = values(p.collect());
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, values(Pipeline::from_dataset(numbers(50)).collect()));
  EXPECT_NE(a, sorted);
  EXPECT_NE(a, b);  // second pass, second order
  auto q = Pipeline::from_dataset(numbers(50)).shuffle(16, 7);
  EXPECT_EQ(values(q.collect()), a);  // same seed, same first pass
}

TEST(DataPipeline, PrefetchKeepsOrderAndForwardsErrors) {
  auto p = Pipeline::from_dataset(numbers(20)).prefetch(3);
  EXPECT_EQ(values(p.collect()), values(Pipeline::from_dataset(numbers(20)).collect()));

  auto bad = Pipeline::from_dataset(numbers(20))
                 .map([](Example e) {
                   if (e.data.item<int64_t>() == 5) throw std::runtime_error("bad five");
                   return e;
                 })
                 .prefetch(2);
  auto s = bad.stream();
  int64_t n = 0;
  try {
    while (s->next()) ++n;
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "bad five");
  }
  EXPECT_EQ(n, 5);
  // Dropping a prefetching stream early joins its thread.
  auto early = Pipeline::from_dataset(numbers(1000)).repeat().prefetch(2).stream();
  early->next();
  early.reset();
}

TEST(DataPipeline, CacheReplaysFirstPass) {
  int calls = 0;
  auto p = Pipeline::from_dataset(numbers(4))
               .map([&calls](Example e) {
                 ++calls;
                 return e;
               })
               .cache();
  EXPECT_EQ(values(p.collect()), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(values(p.collect()), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(calls, 4);
}

Example scalar(int64_t v) {
  return Example{full(Shape{}, static_cast<double>(v), TensorOptions{DType::Int64}), Tensor()};
}

Pipeline range(int64_t lo, int64_t hi) {
  std::vector<Example> xs;
  for (int64_t v = lo; v < hi; ++v) xs.push_back(scalar(v));
  return Pipeline::from_examples(xs);
}

TEST(DataPipeline, InterleaveMatchesTfDataDocumentedOrder) {
  // tf.data.Dataset.interleave's documented example:
  //   Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6),
  //                                  cycle_length=2, block_length=4)
  auto p = range(1, 6).interleave(
      [](const Example& e) { return Pipeline::from_examples({e}).repeat(6); }, 2, 4);
  EXPECT_EQ(values(p.collect()),
            (std::vector<int64_t>{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                  3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5}));
  EXPECT_EQ(values(p.collect()), values(p.collect()));  // deterministic, pass after pass
}

TEST(DataPipeline, InterleaveUnevenAndEmptySubPipelines) {
  // x yields x copies of x; slots refill in place as they run out.
  auto copies = [](const Example& e) {
    return Pipeline::from_examples({e}).repeat(e.data.item<int64_t>());
  };
  EXPECT_EQ(values(range(1, 5).interleave(copies, 2).collect()),
            (std::vector<int64_t>{1, 2, 2, 3, 3, 4, 3, 4, 4, 4}));
  // cycle_length 1 is flat_map; an empty sub-pipeline (x = 0) is skipped.
  EXPECT_EQ(values(range(0, 4).interleave(copies, 1, 3).collect()),
            (std::vector<int64_t>{1, 2, 2, 3, 3, 3}));
  EXPECT_TRUE(range(0, 0).interleave(copies, 3).collect().empty());
  // A cycle longer than the input.
  EXPECT_EQ(values(range(1, 3).interleave(copies, 8, 1).collect()),
            (std::vector<int64_t>{1, 2, 2}));
}

TEST(DataPipeline, InterleaveRejectsBadArguments) {
  auto id = [](const Example& e) { return Pipeline::from_examples({e}); };
  try {
    range(0, 3).interleave(id, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[Pipeline.interleave] expected cycle_length >= 1"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("test_pipeline.cpp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(range(0, 3).interleave(id, 2, 0), Error);
  EXPECT_THROW(range(0, 3).interleave({}, 2), Error);
}

namespace fs = std::filesystem;

class FileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_cache_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "train.cache").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Elements with float data of varying shape, non-contiguous views and int64 targets.
  Pipeline source() {
    calls_ = 0;
    return Pipeline::from_dataset(numbers(5)).map([this](Example e) {
      ++calls_;
      int64_t v = e.data.item<int64_t>();
      Tensor m = arange(static_cast<double>(6 * (v + 1)), TensorOptions{DType::Float32})
                     .reshape(Shape{2, 3 * (v + 1)});
      Example out;
      out.data = m.t();  // a strided view
      if (v % 2 == 0)
        out.target = full(Shape{}, static_cast<double>(v), TensorOptions{DType::Int64});
      return out;
    });
  }

  static void expect_same(const std::vector<Example>& a, const std::vector<Example>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].data.shape(), b[i].data.shape()) << i;
      EXPECT_EQ(a[i].data.dtype(), b[i].data.dtype()) << i;
      EXPECT_EQ(a[i].data.to_vector<double>(), b[i].data.to_vector<double>()) << i;
      ASSERT_EQ(a[i].target.defined(), b[i].target.defined()) << i;
      if (a[i].target.defined()) {
        EXPECT_EQ(a[i].target.dtype(), b[i].target.dtype()) << i;
        EXPECT_EQ(a[i].target.item<int64_t>(), b[i].target.item<int64_t>()) << i;
      }
    }
  }

  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    return out;
  }

  std::string message_of(const Pipeline& p) {
    try {
      p.collect();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path dir_;
  std::string path_;
  std::atomic<int> calls_{0};
};

TEST_F(FileCache, FirstPassWritesLaterPassesRead) {
  auto expected = source().collect();
  auto p = source().cache(path_);
  expect_same(p.collect(), expected);
  EXPECT_EQ(calls_, 5);
  EXPECT_EQ(files(), (std::vector<std::string>{"train.cache"}));
  expect_same(p.collect(), expected);
  EXPECT_EQ(calls_, 5);  // read from the file, upstream not run
  // A new pipeline (as in a later run of the program) finds the file.
  auto again = source().cache(path_);
  expect_same(again.batch(5, false, [](std::vector<Example> xs) { return xs[4]; }).collect(),
              {expected[4]});
  EXPECT_EQ(calls_, 0);
}

TEST_F(FileCache, PartialOrFailedPassLeavesNoFile) {
  auto p = source().cache(path_);
  EXPECT_EQ(p.take(2).collect().size(), 2u);
  EXPECT_TRUE(files().empty());  // neither the cache nor its temp file
  auto failing = source()
                     .map([](Example e) {
                       if (e.data.size(0) == 9) throw std::runtime_error("upstream broke");
                       return e;
                     })
                     .cache(path_);
  EXPECT_THROW(failing.collect(), std::runtime_error);
  EXPECT_TRUE(files().empty());
  // A later complete pass writes it.
  EXPECT_EQ(p.collect().size(), 5u);
  EXPECT_EQ(files(), (std::vector<std::string>{"train.cache"}));
}

TEST_F(FileCache, ConcurrentPassWhileWritingRunsUpstream) {
  auto p = source().cache(path_);
  auto first = p.stream();
  auto second = p.stream();  // the file does not exist yet, and `first` holds the writer slot
  std::vector<Example> a, b;
  while (auto e = second->next()) b.push_back(std::move(*e));
  EXPECT_FALSE(fs::exists(path_));
  while (auto e = first->next()) a.push_back(std::move(*e));
  EXPECT_TRUE(fs::exists(path_));
  expect_same(a, b);
  expect_same(p.collect(), a);
  // Two pipelines caching to one file share the single writer too.
  fs::remove(path_);
  auto one = source().cache(path_).stream();
  auto two = source().cache(path_).stream();
  EXPECT_EQ(two->next()->data.numel(), 6);
  while (one->next()) {
  }
  while (two->next()) {
  }
  EXPECT_EQ(files(), (std::vector<std::string>{"train.cache"}));
}

TEST_F(FileCache, EmptyFilenameIsTheMemoryCache) {
  auto p = source().cache("");
  p.collect();
  p.collect();
  EXPECT_EQ(calls_, 5);
  EXPECT_TRUE(files().empty());
}

TEST_F(FileCache, CorruptFilesAreClearErrors) {
  source().cache(path_).collect();
  std::ifstream in(path_, std::ios::binary);
  std::string good((std::istreambuf_iterator<char>(in)), {});
  auto write = [&](const std::string& bytes) { std::ofstream(path_, std::ios::binary) << bytes; };
  auto cached = [&] { return source().cache(path_); };

  std::string flipped = good;
  flipped[good.size() - 40] ^= 0x10;  // inside the last element's data
  write(flipped);
  std::string msg = message_of(cached());
  EXPECT_NE(msg.find("[Pipeline.cache] corrupt cache file '" + path_ + "' at byte offset"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("checksum mismatch in element 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_pipeline.cpp"), std::string::npos) << msg;

  write(good.substr(0, good.size() - 5));
  msg = message_of(cached());
  EXPECT_NE(msg.find("no end marker at byte offset"), std::string::npos) << msg;

  write("KILNXXXX" + good.substr(8));
  EXPECT_NE(
      message_of(cached()).find("is not a kiln pipeline cache file: bad magic at byte offset 0"),
      std::string::npos);

  write(good.substr(0, 3));
  EXPECT_NE(message_of(cached()).find("is too short"), std::string::npos);

  // A hostile dimension is rejected before allocating: element 0's data header starts at byte 10
  // (8 magic + tag + flags); its first dim is at 12.
  std::string huge = good;
  for (int i = 12; i < 20; ++i) huge[i] = '\x7f';
  write(huge);
  msg = message_of(cached());
  EXPECT_NE(msg.find("at byte offset 10: a float32 tensor of shape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not fit in the"), std::string::npos) << msg;
  EXPECT_EQ(calls_, 0);  // a corrupt cache is an error, not a silent re-run
}

}  // namespace
}  // namespace kiln::data
