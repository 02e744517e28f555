#include "kiln/data/loader.h"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/join.h"

namespace kiln::data {

Example default_collate(std::vector<Example> samples) {
  if (samples.empty()) throw Error("[default_collate] expected at least one sample, but got none");
  std::vector<Tensor> data;
  std::vector<Tensor> target;
  data.reserve(samples.size());
  bool has_target = samples.front().target.defined();
  for (auto& s : samples) {
    data.push_back(std::move(s.data));
    if (has_target) target.push_back(std::move(s.target));
  }
  Example batch;
  batch.data = stack(data, 0);
  if (has_target) batch.target = stack(target, 0);
  return batch;
}

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch) {
  if (n < 0 || static_cast<uint64_t>(n) > std::numeric_limits<uint32_t>::max())
    throw Error(fmt::format("[shuffled_indices] expected 0 <= n < 2^32, but got {}", n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Stream ~0 is reserved for the order so it never coincides with a transform's stream.
  SampleContext ctx{seed, epoch, 0, std::numeric_limits<uint64_t>::max()};
  std::array<uint32_t, 4> bits{};
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t lane = i % 4;
    if (i == n - 1 || lane == 3) {
      ctx.index = i / 4;
      bits = sample_bits(ctx);
    }
    int64_t j = bounded_int(bits[static_cast<size_t>(lane)], static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

namespace detail {

// One pass over the loader: the epoch's sample order plus, with workers, the threads building
// batches ahead of the consumer. Owned by the iterators; the last one to go joins the threads.
class EpochRun {
 public:
  EpochRun(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options, uint64_t epoch)
      : dataset_(std::move(dataset)), options_(options), epoch_(epoch) {
    int64_t n = dataset_->size();
    if (options_.shuffle) {
      order_ = shuffled_indices(n, options_.seed, epoch_);
    } else {
      order_.resize(static_cast<size_t>(n));
      std::iota(order_.begin(), order_.end(), 0);
    }
    int64_t bs = options_.batch_size;
    num_batches_ = options_.drop_last ? n / bs : (n + bs - 1) / bs;
    int workers = options_.num_workers;
    queues_.resize(static_cast<size_t>(workers));
    try {
      for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { work(w); });
    } catch (...) {
      shutdown();  // the destructor does not run for a half-built run
      throw;
    }
  }

  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  ~EpochRun() { shutdown(); }

  int64_t num_batches() const { return num_batches_; }

 private:
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    space_.notify_all();
    ready_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 public:
  // Batch k; must be called for k = 0, 1, 2, ... in order. Rethrows a failed batch's error.
  Example next(int64_t k) {
    if (threads_.empty()) {
      NoGradGuard no_grad;
      return build(k);
    }
    auto w = static_cast<size_t>(k % static_cast<int64_t>(threads_.size()));
    Result r;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return !queues_[w].empty(); });
      r = std::move(queues_[w].front());
      queues_[w].pop_front();
    }
    space_.notify_all();
    if (r.error) std::rethrow_exception(r.error);
    return std::move(r.batch);
  }

 private:
  struct Result {
    Example batch;
    std::exception_ptr error;
  };

  Example build(int64_t k) const {
    int64_t bs = options_.batch_size;
    int64_t begin = k * bs;
    int64_t end = std::min<int64_t>(begin + bs, static_cast<int64_t>(order_.size()));
    std::vector<Example> samples;
    samples.reserve(static_cast<size_t>(end - begin));
    for (int64_t i = begin; i < end; ++i) {
      int64_t index = order_[static_cast<size_t>(i)];
      try {
        samples.push_back(
            dataset_->get_sample(index, SampleContext{options_.seed, epoch_, index, 0}));
      } catch (const std::exception& e) {
        throw Error(fmt::format("[DataLoader] sample {} failed: {}", index, e.what()));
      } catch (...) {
        throw Error(fmt::format("[DataLoader] sample {} failed: unknown exception", index));
      }
    }
    try {
      return options_.collate ? options_.collate(std::move(samples))
                              : default_collate(std::move(samples));
    } catch (const std::exception& e) {
      throw Error(fmt::format("[DataLoader] collate of batch {} failed: {}", k, e.what()));
    }
  }

  void work(int w) {
    // Workers already run in parallel; nested OpenMP teams would only oversubscribe the cores.
    omp_set_num_threads(1);
    NoGradGuard no_grad;
    auto workers = static_cast<int64_t>(threads_capacity());
    auto slot = static_cast<size_t>(w);
    for (int64_t k = w; k < num_batches_; k += workers) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        space_.wait(lock, [&] {
          return stop_ || static_cast<int64_t>(queues_[slot].size()) < options_.prefetch;
        });
        if (stop_) return;
      }
      Result r;
      try {
        r.batch = build(k);
      } catch (...) {
        r.error = std::current_exception();
      }
      bool failed = static_cast<bool>(r.error);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queues_[slot].push_back(std::move(r));
      }
      ready_.notify_all();
      // The consumer stops at the first error, so later batches of this worker are never read.
      if (failed) return;
    }
  }

  // The worker count, fixed before any thread starts (threads_ may still be growing).
  size_t threads_capacity() const { return queues_.size(); }

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  uint64_t epoch_;
  std::vector<int64_t> order_;
  int64_t num_batches_ = 0;

  std::mutex mutex_;
  std::condition_variable ready_;  // a worker queued a batch
  std::condition_variable space_;  // the consumer took a batch, or stop_
  std::vector<std::deque<Result>> queues_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       const Loc& loc)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  if (!dataset_) fail("DataLoader", loc, "expected a dataset, but got a null pointer");
  if (options_.batch_size < 1)
    fail("DataLoader", loc, "expected batch_size >= 1, but got {}", options_.batch_size);
  if (options_.num_workers < 0)
    fail("DataLoader", loc, "expected num_workers >= 0, but got {}", options_.num_workers);
  if (options_.prefetch < 1)
    fail("DataLoader", loc, "expected prefetch >= 1, but got {}", options_.prefetch);
}

int64_t DataLoader::num_batches() const {
  int64_t n = dataset_->size();
  int64_t bs = options_.batch_size;
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

DataLoader::Iterator DataLoader::begin() {
  auto run = std::make_shared<detail::EpochRun>(dataset_, options_, epoch_);
  ++epoch_;
  return Iterator(std::move(run));
}

DataLoader::Iterator::Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) {
  fetch();
}

bool DataLoader::Iterator::at_end() const {
  return !run_ || k_ >= run_->num_batches();
}

void DataLoader::Iterator::fetch() {
  if (at_end()) return;
  try {
    current_ = run_->next(k_);
  } catch (...) {
    // An error ends the pass: drop the run (joining its workers) before the caller sees it.
    run_.reset();
    throw;
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++k_;
  fetch();
  return *this;
}

}  // namespace kiln::data
