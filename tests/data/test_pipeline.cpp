#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
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

}  // namespace
}  // namespace kiln::data
