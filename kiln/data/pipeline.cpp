#include "kiln/data/pipeline.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/data/loader.h"

namespace kiln::data {
namespace {

using Up = std::unique_ptr<Stream>;

// Counts the passes started over one stage, so each pass can have its own random keys.
using PassCounter = std::shared_ptr<std::atomic<uint64_t>>;

class DatasetStream final : public Stream {
 public:
  DatasetStream(std::shared_ptr<const Dataset> ds, uint64_t seed, uint64_t pass)
      : ds_(std::move(ds)), seed_(seed), pass_(pass) {}
  std::optional<Example> next() override {
    if (i_ >= ds_->size()) return std::nullopt;
    int64_t index = i_++;
    return ds_->get_sample(index, SampleContext{seed_, pass_, index, 0});
  }

 private:
  std::shared_ptr<const Dataset> ds_;
  uint64_t seed_;
  uint64_t pass_;
  int64_t i_ = 0;
};

class VectorStream final : public Stream {
 public:
  explicit VectorStream(std::shared_ptr<const std::vector<Example>> items)
      : items_(std::move(items)) {}
  std::optional<Example> next() override {
    if (i_ >= items_->size()) return std::nullopt;
    return (*items_)[i_++];
  }

 private:
  std::shared_ptr<const std::vector<Example>> items_;
  size_t i_ = 0;
};

class MapStream final : public Stream {
 public:
  MapStream(Up up, std::function<Example(Example)> fn) : up_(std::move(up)), fn_(std::move(fn)) {}
  std::optional<Example> next() override {
    auto e = up_->next();
    if (!e) return std::nullopt;
    return fn_(std::move(*e));
  }

 private:
  Up up_;
  std::function<Example(Example)> fn_;
};

class FilterStream final : public Stream {
 public:
  FilterStream(Up up, std::function<bool(const Example&)> keep)
      : up_(std::move(up)), keep_(std::move(keep)) {}
  std::optional<Example> next() override {
    while (auto e = up_->next())
      if (keep_(*e)) return e;
    return std::nullopt;
  }

 private:
  Up up_;
  std::function<bool(const Example&)> keep_;
};

class ShuffleStream final : public Stream {
 public:
  ShuffleStream(Up up, int64_t buffer, uint64_t seed, uint64_t pass)
      : up_(std::move(up)), capacity_(static_cast<size_t>(buffer)), ctx_{seed, pass, 0, 0} {
    // A stream id of its own keeps the draws apart from transforms keyed by the same seed.
    ctx_.stream = std::numeric_limits<uint64_t>::max() - 1;
  }
  std::optional<Example> next() override {
    while (!exhausted_ && buffer_.size() < capacity_) {
      auto e = up_->next();
      if (!e) {
        exhausted_ = true;
        break;
      }
      buffer_.push_back(std::move(*e));
    }
    if (buffer_.empty()) return std::nullopt;
    ctx_.index = draws_++;
    auto j = static_cast<size_t>(bounded_int(sample_bits(ctx_)[0], buffer_.size()));
    Example out = std::move(buffer_[j]);
    buffer_[j] = std::move(buffer_.back());
    buffer_.pop_back();
    return out;
  }

 private:
  Up up_;
  size_t capacity_;
  SampleContext ctx_;
  std::vector<Example> buffer_;
  bool exhausted_ = false;
  int64_t draws_ = 0;
};

class BatchStream final : public Stream {
 public:
  BatchStream(Up up, int64_t size, bool drop, std::function<Example(std::vector<Example>)> collate)
      : up_(std::move(up)), size_(size), drop_(drop), collate_(std::move(collate)) {}
  std::optional<Example> next() override {
    std::vector<Example> items;
    while (static_cast<int64_t>(items.size()) < size_) {
      auto e = up_->next();
      if (!e) break;
      items.push_back(std::move(*e));
    }
    if (items.empty() || (drop_ && static_cast<int64_t>(items.size()) < size_)) return std::nullopt;
    return collate_ ? collate_(std::move(items)) : default_collate(std::move(items));
  }

 private:
  Up up_;
  int64_t size_;
  bool drop_;
  std::function<Example(std::vector<Example>)> collate_;
};

class TakeStream final : public Stream {
 public:
  TakeStream(Up up, int64_t n, bool skip) : up_(std::move(up)), n_(n), skip_(skip) {}
  std::optional<Example> next() override {
    if (skip_) {
      for (; n_ > 0; --n_)
        if (!up_->next()) return std::nullopt;
      return up_->next();
    }
    if (n_ <= 0) return std::nullopt;
    --n_;
    return up_->next();
  }

 private:
  Up up_;
  int64_t n_;
  bool skip_;
};

class RepeatStream final : public Stream {
 public:
  RepeatStream(Pipeline::Factory factory, int64_t count)
      : factory_(std::move(factory)), count_(count) {}
  std::optional<Example> next() override {
    while (true) {
      if (!up_) {
        if (count_ >= 0 && passes_ >= count_) return std::nullopt;
        up_ = factory_();
        ++passes_;
        yielded_ = false;
      }
      if (auto e = up_->next()) {
        yielded_ = true;
        return e;
      }
      up_.reset();
      // An empty pass would make repeat() spin forever.
      if (!yielded_) return std::nullopt;
    }
  }

 private:
  Pipeline::Factory factory_;
  int64_t count_;
  int64_t passes_ = 0;
  bool yielded_ = false;
  Up up_;
};

class PrefetchStream final : public Stream {
 public:
  PrefetchStream(Up up, int64_t buffer) : up_(std::move(up)), capacity_(buffer) {
    thread_ = std::thread([this] { run(); });
  }
  ~PrefetchStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::optional<Example> next() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !queue_.empty() || done_; });
    if (queue_.empty()) {
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      return std::nullopt;
    }
    Example e = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return e;
  }

 private:
  void run() {
    NoGradGuard no_grad;
    try {
      while (true) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < capacity_; });
          if (stop_) break;
        }
        auto e = up_->next();
        if (!e) break;
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(*e));
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    cv_.notify_all();
  }

  Up up_;
  int64_t capacity_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Example> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  bool done_ = false;
  std::thread thread_;
};

struct CacheState {
  std::mutex mutex;
  std::shared_ptr<const std::vector<Example>> items;  // set once a pass has completed
};

class CachingStream final : public Stream {
 public:
  CachingStream(Up up, std::shared_ptr<CacheState> state)
      : up_(std::move(up)), state_(std::move(state)) {}
  std::optional<Example> next() override {
    auto e = up_->next();
    if (e) {
      seen_.push_back(*e);
      return e;
    }
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->items)
      state_->items = std::make_shared<const std::vector<Example>>(std::move(seen_));
    return std::nullopt;
  }

 private:
  Up up_;
  std::shared_ptr<CacheState> state_;
  std::vector<Example> seen_;
};

// Note [interleave]: this is tf.data's InterleaveDataset iterator, step for step. The current
// slot, when open, yields its next element (after block_length of them, or when it runs out, the
// cycle moves on to the next slot); an empty slot is filled with fn(next input element) without
// moving on; once the input is exhausted, empty slots are skipped until every slot is closed.
class InterleaveStream final : public Stream {
 public:
  InterleaveStream(Up input, std::function<Pipeline(const Example&)> fn, int64_t cycle,
                   int64_t block)
      : input_(std::move(input)), fn_(std::move(fn)), slots_(cycle), block_(block) {}
  std::optional<Example> next() override {
    while (!end_of_input_ || open_ > 0) {
      Up& slot = slots_[cycle_index_];
      if (slot) {
        if (auto e = slot->next()) {
          if (++block_index_ == block_) advance();
          return e;
        }
        slot.reset();
        --open_;
        advance();
      } else if (!end_of_input_) {
        auto e = input_->next();
        if (!e) {
          end_of_input_ = true;
          continue;
        }
        slot = fn_(*e).stream();
        ++open_;
      } else {
        advance();
      }
    }
    return std::nullopt;
  }

 private:
  void advance() {
    block_index_ = 0;
    cycle_index_ = (cycle_index_ + 1) % slots_.size();
  }

  Up input_;
  std::function<Pipeline(const Example&)> fn_;
  std::vector<Up> slots_;
  int64_t block_;
  size_t cycle_index_ = 0;
  int64_t block_index_ = 0;
  int64_t open_ = 0;
  bool end_of_input_ = false;
};

void check_positive(const char* stage, int64_t n, bool allow_zero) {
  if (n < 0 || (!allow_zero && n == 0))
    fail(stage, Loc::current(), "expected a count {} 0, but got {}", allow_zero ? ">=" : ">", n);
}

}  // namespace

Pipeline Pipeline::from_dataset(std::shared_ptr<const Dataset> dataset, uint64_t seed) {
  if (!dataset) throw Error("[Pipeline] expected a dataset, but got a null pointer");
  auto passes = std::make_shared<std::atomic<uint64_t>>(0);
  return Pipeline([dataset, seed, passes]() -> Up {
    return std::make_unique<DatasetStream>(dataset, seed, passes->fetch_add(1));
  });
}

Pipeline Pipeline::from_examples(std::vector<Example> examples) {
  auto items = std::make_shared<const std::vector<Example>>(std::move(examples));
  return Pipeline([items]() -> Up { return std::make_unique<VectorStream>(items); });
}

Pipeline Pipeline::map(std::function<Example(Example)> fn) const {
  return Pipeline([f = factory_, fn]() -> Up { return std::make_unique<MapStream>(f(), fn); });
}

Pipeline Pipeline::filter(std::function<bool(const Example&)> keep) const {
  return Pipeline(
      [f = factory_, keep]() -> Up { return std::make_unique<FilterStream>(f(), keep); });
}

Pipeline Pipeline::shuffle(int64_t buffer, uint64_t seed) const {
  check_positive("Pipeline.shuffle", buffer, false);
  auto passes = std::make_shared<std::atomic<uint64_t>>(0);
  return Pipeline([f = factory_, buffer, seed, passes]() -> Up {
    return std::make_unique<ShuffleStream>(f(), buffer, seed, passes->fetch_add(1));
  });
}

Pipeline Pipeline::batch(int64_t size, bool drop_remainder,
                         std::function<Example(std::vector<Example>)> collate) const {
  check_positive("Pipeline.batch", size, false);
  return Pipeline([f = factory_, size, drop_remainder, collate]() -> Up {
    return std::make_unique<BatchStream>(f(), size, drop_remainder, collate);
  });
}

Pipeline Pipeline::take(int64_t n) const {
  check_positive("Pipeline.take", n, true);
  return Pipeline(
      [f = factory_, n]() -> Up { return std::make_unique<TakeStream>(f(), n, false); });
}

Pipeline Pipeline::skip(int64_t n) const {
  check_positive("Pipeline.skip", n, true);
  return Pipeline([f = factory_, n]() -> Up { return std::make_unique<TakeStream>(f(), n, true); });
}

Pipeline Pipeline::repeat(int64_t count) const {
  return Pipeline(
      [f = factory_, count]() -> Up { return std::make_unique<RepeatStream>(f, count); });
}

Pipeline Pipeline::prefetch(int64_t buffer) const {
  check_positive("Pipeline.prefetch", buffer, false);
  return Pipeline(
      [f = factory_, buffer]() -> Up { return std::make_unique<PrefetchStream>(f(), buffer); });
}

Pipeline Pipeline::cache() const {
  auto state = std::make_shared<CacheState>();
  return Pipeline([f = factory_, state]() -> Up {
    std::shared_ptr<const std::vector<Example>> items;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      items = state->items;
    }
    if (items) return std::make_unique<VectorStream>(items);
    return std::make_unique<CachingStream>(f(), state);
  });
}

Pipeline Pipeline::interleave(std::function<Pipeline(const Example&)> fn, int64_t cycle_length,
                              int64_t block_length, const Loc& loc) const {
  if (!fn) fail("Pipeline.interleave", loc, "expected a function, but got an empty one");
  if (cycle_length < 1 || block_length < 1)
    fail("Pipeline.interleave", loc,
         "expected cycle_length >= 1 and block_length >= 1, but got {} and {}", cycle_length,
         block_length);
  return Pipeline([f = factory_, fn, cycle_length, block_length]() -> Up {
    return std::make_unique<InterleaveStream>(f(), fn, cycle_length, block_length);
  });
}

std::vector<Example> Pipeline::collect() const {
  std::vector<Example> out;
  auto s = stream();
  while (auto e = s->next()) out.push_back(std::move(*e));
  return out;
}

}  // namespace kiln::data
