#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/data/loader.h"
#include "kiln/ops/factories.h"

namespace kiln::data {
namespace {

// 37 images [1, 6, 6] whose pixels encode the sample index, labels = index.
std::shared_ptr<TensorDataset> numbered(int64_t n = 37) {
  Tensor data =
      arange(static_cast<double>(n * 36), TensorOptions{DType::Float32}).reshape(Shape{n, 1, 6, 6});
  Tensor target = arange(static_cast<double>(n), TensorOptions{DType::Int64});
  return std::make_shared<TensorDataset>(data, target);
}

std::shared_ptr<Dataset> augmented() {
  return std::make_shared<TransformDataset>(numbered(),
                                            Compose({RandomCrop(4, 1), RandomHorizontalFlip(0.5)}));
}

struct Flat {
  std::vector<std::vector<float>> data;
  std::vector<std::vector<int64_t>> target;
};

Flat collect(DataLoader& loader) {
  Flat out;
  for (const Example& b : loader) {
    out.data.push_back(b.data.to_vector<float>());
    out.target.push_back(b.target.to_vector<int64_t>());
  }
  return out;
}

TEST(DataLoader, SameBatchesForAnyWorkerCount) {
  std::vector<Flat> runs;
  for (int workers : {0, 1, 4}) {
    DataLoader loader(augmented(),
                      {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = 42});
    loader.set_epoch(3);
    runs.push_back(collect(loader));
  }
  ASSERT_EQ(runs[0].data.size(), 8u);
  for (size_t r = 1; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].data, runs[0].data) << "run " << r;
    EXPECT_EQ(runs[r].target, runs[0].target) << "run " << r;
  }
  // Shuffled: every index exactly once, not in order.
  std::multiset<int64_t> seen;
  std::vector<int64_t> flat;
  for (auto& t : runs[0].target)
    for (int64_t v : t) seen.insert(v), flat.push_back(v);
  EXPECT_EQ(seen.size(), 37u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 37u);
  std::vector<int64_t> sorted = flat;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(flat, sorted);
}

TEST(DataLoader, EpochsAdvanceAndDiffer) {
  DataLoader loader(numbered(), {.batch_size = 37, .shuffle = true, .seed = 1});
  EXPECT_EQ(loader.epoch(), 0u);
  Flat e0 = collect(loader);
  EXPECT_EQ(loader.epoch(), 1u);
  Flat e1 = collect(loader);
  EXPECT_NE(e0.target, e1.target);
  loader.set_epoch(0);
  EXPECT_EQ(collect(loader).target, e0.target);
  EXPECT_EQ(shuffled_indices(100, 9, 4), shuffled_indices(100, 9, 4));
  EXPECT_NE(shuffled_indices(100, 9, 4), shuffled_indices(100, 10, 4));
}

TEST(DataLoader, DropLastAndShapes) {
  DataLoader keep(numbered(), {.batch_size = 10});
  EXPECT_EQ(keep.num_batches(), 4);
  std::vector<int64_t> sizes;
  for (const Example& b : keep) {
    sizes.push_back(b.data.size(0));
    EXPECT_EQ(b.data.dim(), 4);
    EXPECT_EQ(b.target.dtype(), DType::Int64);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{10, 10, 10, 7}));

  DataLoader drop(numbered(), {.batch_size = 10, .drop_last = true, .num_workers = 2});
  EXPECT_EQ(drop.num_batches(), 3);
  Flat f = collect(drop);
  ASSERT_EQ(f.target.size(), 3u);
  EXPECT_EQ(f.target[2].front(), 20);  // unshuffled order
  EXPECT_EQ(f.target[2].back(), 29);
}

TEST(DataLoader, CustomCollate) {
  DataLoaderOptions opts{.batch_size = 4};
  opts.collate = [](std::vector<Example> samples) {
    Example e;
    e.data = full(Shape{1}, static_cast<double>(samples.size()));
    return e;
  };
  DataLoader loader(numbered(9), opts);
  std::vector<float> counts;
  for (const Example& b : loader) counts.push_back(b.data.item<float>());
  EXPECT_EQ(counts, (std::vector<float>{4, 4, 1}));
}

// Throws for one index; counts calls so a test can see the workers stopped.
class Failing final : public Dataset {
 public:
  explicit Failing(int64_t bad) : base_(numbered(200)), bad_(bad) {}
  int64_t size() const override { return base_->size(); }
  Example get_sample(int64_t index, const SampleContext& ctx) const override {
    if (index == bad_) throw std::runtime_error("disk on fire");
    return base_->get_sample(index, ctx);
  }

 private:
  std::shared_ptr<TensorDataset> base_;
  int64_t bad_;
};

TEST(DataLoader, WorkerErrorSurfacesWithIndex) {
  auto start = std::chrono::steady_clock::now();
  for (int workers : {0, 1, 4}) {
    DataLoader loader(std::make_shared<Failing>(123), {.batch_size = 8, .num_workers = workers});
    int64_t batches = 0;
    try {
      for (const Example& b : loader) {
        (void)b;
        ++batches;
      }
      FAIL() << "expected an error with " << workers << " workers";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("[DataLoader] sample 123 failed: disk on fire"), std::string::npos) << msg;
    }
    EXPECT_EQ(batches, 15);  // batches 0..14 precede the one holding sample 123
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(DataLoader, EarlyBreakJoinsWorkers) {
  auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 5; ++round) {
    DataLoader loader(augmented(),
                      {.batch_size = 2, .shuffle = true, .num_workers = 4, .prefetch = 1});
    int seen = 0;
    for (const Example& b : loader) {
      EXPECT_EQ(b.data.size(0), 2);
      if (++seen == 2) break;
    }
    EXPECT_EQ(seen, 2);
    // Never touching begin() is fine too; so is an iterator that is begun and dropped at once.
    { auto it = loader.begin(); }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(DataLoader, RejectsBadOptions) {
  EXPECT_THROW(DataLoader(numbered(), {.batch_size = 0}), Error);
  EXPECT_THROW(DataLoader(numbered(), {.num_workers = -1}), Error);
  EXPECT_THROW(DataLoader(nullptr), Error);
}

}  // namespace
}  // namespace kiln::data
