#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

// Stacks the samples' data (and targets, when defined) along a new dim 0.
Example default_collate(std::vector<Example> samples);

// The epoch's order of [0, n): a Fisher-Yates shuffle whose draws are Philox words keyed by
// (seed, epoch), so every worker count and every machine sees the same permutation.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch);

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  // 0 runs everything in the caller's thread; otherwise batch k is built by thread k % workers.
  int num_workers = 0;
  // Batches each worker may have finished ahead of the consumer.
  int prefetch = 2;
  uint64_t seed = 0;
  // Empty means default_collate.
  std::function<Example(std::vector<Example>)> collate = {};
};

namespace detail {
class EpochRun;
}

// Note [loader determinism]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// An epoch's batch k is a pure function of (dataset, options, epoch, k): the order comes from
// shuffled_indices(seed, epoch), and each sample's random transforms see
// SampleContext{seed, epoch, index}. Workers only decide *when* a batch is built, never *what*
// it holds, so 0, 1 or 8 workers yield identical batches, in order.
//
// Each pass over the loader (each begin()) uses epoch() and then advances it by one; set_epoch
// chooses the epoch of the next pass. A sample that throws surfaces from the iterator as
// kiln::Error "[DataLoader] sample <index> failed: <message>"; leaving the loop early, or by an
// exception, stops and joins the workers when the iterator is destroyed.
class DataLoader {
 public:
  explicit DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {},
                      const Loc& loc = Loc::current());

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = const Example*;
    using reference = const Example&;

    Iterator() = default;
    const Example& operator*() const { return current_; }
    const Example* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::EpochRun> run);
    bool at_end() const;
    void fetch();

    std::shared_ptr<detail::EpochRun> run_;
    int64_t k_ = 0;
    Example current_;
  };

  Iterator begin();
  Iterator end() { return Iterator(); }

  int64_t num_batches() const;
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  uint64_t epoch_ = 0;
};

}  // namespace kiln::data
