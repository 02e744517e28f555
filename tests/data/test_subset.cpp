#include "kiln/data/subset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/data/loader.h"
#include "kiln/ops/factories.h"
#include "tests/support/test_util.h"

namespace kiln::data {
namespace {

std::shared_ptr<TensorDataset> numbered(int64_t n) {
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t i = 0; i < n; ++i) xs.push_back(static_cast<float>(i)), ys.push_back(i % 3);
  return std::make_shared<TensorDataset>(tensor<float>(xs, Shape{n, 1}), tensor<int64_t>(ys));
}

// Records the index each sample was read with.
class IndexEcho final : public Dataset {
 public:
  int64_t size() const override { return 10; }
  Example get_sample(int64_t, const SampleContext& ctx) const override {
    return Example{tensor<int64_t>({ctx.index}), Tensor()};
  }
};

TEST(DataSubset, ValidationSplitTakesTheLastFractionLikeKeras) {
  auto [train, val] = validation_split(numbered(10), 0.2);
  ASSERT_EQ(train->size(), 8);  // floor(10 * 0.8)
  ASSERT_EQ(val->size(), 2);
  EXPECT_EQ(train->get(7).data.to_vector<float>(), std::vector<float>{7.0f});
  EXPECT_EQ(val->get(0).data.to_vector<float>(), std::vector<float>{8.0f});
  EXPECT_EQ(val->get(1).target.to_vector<int64_t>(), std::vector<int64_t>{0});

  DataLoader loader(val, {.batch_size = 4});
  int batches = 0;
  for (const Example& b : loader) {
    EXPECT_EQ(b.data.to_vector<float>(), (std::vector<float>{8.0f, 9.0f}));
    ++batches;
  }
  EXPECT_EQ(batches, 1);
}

TEST(DataSubset, TransformsSeeTheBaseIndex) {
  Subset tail(std::make_shared<IndexEcho>(), 6, 10);
  EXPECT_EQ(tail.get(1).data.to_vector<int64_t>(), std::vector<int64_t>{7});
}

TEST(DataSubset, BadArgumentsNameTheProblemAndTheCaller) {
  // Each message also names this file (the caller's line).
  auto expect_error = [](auto fn, const std::string& text) {
    test::expect_error(fn, {text, "test_subset.cpp"});
  };
  expect_error([] { validation_split(numbered(10), 0.0); }, "fraction in (0, 1)");
  expect_error([] { validation_split(numbered(10), 1.5); }, "fraction in (0, 1)");
  expect_error([] { validation_split(numbered(10), 0.95); }, "both parts non-empty");
  expect_error([] { Subset(numbered(4), 2, 5); }, "[Subset]");
  test::expect_error([] { Subset(numbered(4), 0, 2).get_sample(2, {}); },
                     {"expected an index in [0, 2), but got 2"});
}

TEST(DataSubset, RandomSplitIsAFixedFunctionOfTheSeedAndCoversEverySampleOnce) {
  auto [rest, held] = random_split(numbered(50), 0.2, 7);
  ASSERT_EQ(held->size(), 10);  // ceil(50 * 0.2)
  ASSERT_EQ(rest->size(), 40);
  std::vector<int64_t> all = rest->indices();
  all.insert(all.end(), held->indices().begin(), held->indices().end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
  EXPECT_TRUE(std::is_sorted(held->indices().begin(), held->indices().end()));
  // Samples are the base's at those indices; transforms see the base's index.
  EXPECT_EQ(held->get(3).data.to_vector<float>(),
            std::vector<float>{static_cast<float>(held->indices()[3])});
  const auto again = random_split(numbered(50), 0.2, 7).second;
  EXPECT_EQ(again->indices(), held->indices());
  // std::mt19937_64 is fully specified, so the permutation is the same everywhere: pin it.
  EXPECT_EQ(held->indices(), (std::vector<int64_t>{5, 16, 17, 25, 26, 27, 36, 38, 39, 47}));
  EXPECT_NE(random_split(numbered(50), 0.2, 8).second->indices(), held->indices());
  IndexSubset picked(std::make_shared<IndexEcho>(), {9, 2});
  EXPECT_EQ(picked.get(0).data.to_vector<int64_t>(), std::vector<int64_t>{9});
}

TEST(DataSubset, RandomSplitAndIndexSubsetErrors) {
  test::expect_error([] { random_split(numbered(10), 0.0, 1); }, {"fraction in (0, 1)"});
  test::expect_error([] { random_split(numbered(3), 0.9, 1); }, {"both parts non-empty"});
  test::expect_error(
      [] {
        IndexSubset(numbered(3), {0, 3});
      },
      {"[IndexSubset]", "indices in [0, 3), but got 3"});
  test::expect_error([] { IndexSubset(numbered(3), {1}).get_sample(1, {}); },
                     {"expected an index in [0, 1), but got 1"});
}

}  // namespace
}  // namespace kiln::data
