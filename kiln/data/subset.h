#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

// Samples [begin, end) of `base`, indexed from 0. The base receives the subset's SampleContext
// with the base's own index, so random transforms stay keyed to the underlying sample whichever
// subset it is read through.
class Subset final : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, int64_t begin, int64_t end,
         const Loc& loc = Loc::current());
  int64_t size() const override { return end_ - begin_; }
  Example get_sample(int64_t index, const SampleContext& ctx) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t begin_, end_;
};

// Keras' validation_split: the last `fraction` of the samples, taken before any shuffling,
// become the validation set and the rest the training set (split at
// floor(size * (1 - fraction))). fraction must lie in (0, 1) and leave both parts non-empty.
// Returns {train, validation}.
std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> validation_split(
    std::shared_ptr<const Dataset> dataset, double fraction, const Loc& loc = Loc::current());

// The samples of `base` at `indices` (each in [0, base.size())), in that order; like Subset the
// base sees its own index in the SampleContext.
class IndexSubset final : public Dataset {
 public:
  IndexSubset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices,
              const Loc& loc = Loc::current());
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get_sample(int64_t index, const SampleContext& ctx) const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// torch.utils.data.random_split's idea for a held-out part: a permutation of the sample indices
// drawn from `seed` alone (a Fisher-Yates shuffle over std::mt19937_64, so the same on every run
// and machine), whose first ceil(size * fraction) indices, sorted, are the held-out part and the
// rest, sorted, the other. fraction must lie in (0, 1) and leave both parts non-empty.
// Returns {rest, held_out}.
std::pair<std::shared_ptr<IndexSubset>, std::shared_ptr<IndexSubset>> random_split(
    std::shared_ptr<const Dataset> dataset, double fraction, uint64_t seed,
    const Loc& loc = Loc::current());

}  // namespace kiln::data
