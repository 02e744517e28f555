#include "kiln/data/subset.h"

#include <cmath>

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

}  // namespace kiln::data
