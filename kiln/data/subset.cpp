#include "kiln/data/subset.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "kiln/core/error.h"

namespace kiln::data {

Subset::Subset(std::shared_ptr<const Dataset> base, int64_t begin, int64_t end, const Loc& loc)
    : base_(std::move(base)), begin_(begin), end_(end) {
  if (!base_) fail("Subset", loc, "expected a dataset, but got a null pointer");
  if (begin < 0 || end < begin || end > base_->size())
    fail("Subset", loc, "expected 0 <= begin <= end <= {} (the dataset's size), but got [{}, {})",
         base_->size(), begin, end);
}

Example Subset::get_sample(int64_t index, const SampleContext& ctx) const {
  if (index < 0 || index >= size())
    fail("Subset", Loc::current(), "expected an index in [0, {}), but got {}", size(), index);
  SampleContext base_ctx = ctx;
  base_ctx.index = begin_ + index;
  return base_->get_sample(begin_ + index, base_ctx);
}

std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> validation_split(
    std::shared_ptr<const Dataset> dataset, double fraction, const Loc& loc) {
  if (!dataset) fail("validation_split", loc, "expected a dataset, but got a null pointer");
  if (!(fraction > 0.0 && fraction < 1.0))
    fail("validation_split", loc, "expected a fraction in (0, 1), but got {}", fraction);
  const int64_t n = dataset->size();
  const auto at = static_cast<int64_t>(std::floor(static_cast<double>(n) * (1.0 - fraction)));
  if (at <= 0 || at >= n)
    fail("validation_split", loc,
         "expected a fraction that leaves both parts non-empty, but {} of {} samples gives {} "
         "for training and {} for validation",
         fraction, n, at, n - at);
  return {std::make_shared<Subset>(dataset, 0, at, loc),
          std::make_shared<Subset>(dataset, at, n, loc)};
}

IndexSubset::IndexSubset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices,
                         const Loc& loc)
    : base_(std::move(base)), indices_(std::move(indices)) {
  if (!base_) fail("IndexSubset", loc, "expected a dataset, but got null");
  const int64_t n = base_->size();
  for (const int64_t i : indices_)
    if (i < 0 || i >= n) fail("IndexSubset", loc, "expected indices in [0, {}), but got {}", n, i);
}

Example IndexSubset::get_sample(int64_t index, const SampleContext& ctx) const {
  if (index < 0 || index >= size())
    fail("IndexSubset", Loc::current(), "expected an index in [0, {}), but got {}", size(), index);
  SampleContext base_ctx = ctx;
  base_ctx.index = indices_[static_cast<size_t>(index)];
  return base_->get_sample(base_ctx.index, base_ctx);
}

std::pair<std::shared_ptr<IndexSubset>, std::shared_ptr<IndexSubset>> random_split(
    std::shared_ptr<const Dataset> dataset, double fraction, uint64_t seed, const Loc& loc) {
  if (!dataset) fail("random_split", loc, "expected a dataset, but got null");
  const int64_t n = dataset->size();
  if (!(fraction > 0.0 && fraction < 1.0))
    fail("random_split", loc, "expected a fraction in (0, 1), but got {}", fraction);
  const auto held = static_cast<int64_t>(std::ceil(static_cast<double>(n) * fraction));
  if (held < 1 || held >= n)
    fail("random_split", loc,
         "expected a fraction that leaves both parts non-empty, but got {} of {} samples "
         "({} held out)",
         fraction, n, held);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937_64 gen(seed);
  for (int64_t i = n - 1; i > 0;
       --i)  // gen() % (i + 1): libstdc++-independent, unlike std::shuffle
    std::swap(order[static_cast<size_t>(i)],
              order[static_cast<size_t>(gen() % static_cast<uint64_t>(i + 1))]);
  std::vector<int64_t> out(order.begin(), order.begin() + held),
      rest(order.begin() + held, order.end());
  std::sort(out.begin(), out.end());
  std::sort(rest.begin(), rest.end());
  return {std::make_shared<IndexSubset>(dataset, std::move(rest), loc),
          std::make_shared<IndexSubset>(std::move(dataset), std::move(out), loc)};
}

}  // namespace kiln::data
