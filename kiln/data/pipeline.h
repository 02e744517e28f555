#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

// One pass over a pipeline: next() yields elements until it returns nullopt.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual std::optional<Example> next() = 0;
};

// Note [pipelines]
// ~~~~~~~~~~~~~~~~
// A tf.data-style chain of lazy stages. A Pipeline is a recipe (a factory of Streams), cheap to
// copy; nothing runs until a pass starts. Stages see the element only, so randomness (shuffle)
// is keyed by the stage's seed, the pass number and a draw counter, never by threads.
// Not implemented: interleave and a file-backed cache.
class Pipeline {
 public:
  using Factory = std::function<std::unique_ptr<Stream>()>;
  explicit Pipeline(Factory factory) : factory_(std::move(factory)) {}

  // The dataset's samples in index order, with SampleContext{seed, pass, index} (the n-th pass
  // over this source, counting from 0, is its epoch).
  static Pipeline from_dataset(std::shared_ptr<const Dataset> dataset, uint64_t seed = 0);
  static Pipeline from_examples(std::vector<Example> examples);

  Pipeline map(std::function<Example(Example)> fn) const;
  Pipeline filter(std::function<bool(const Example&)> keep) const;
  // A buffer of `buffer` elements; each output is a uniformly drawn buffer slot (as tf.data).
  Pipeline shuffle(int64_t buffer, uint64_t seed) const;
  // Groups `size` elements with `collate` (empty: default_collate).
  Pipeline batch(int64_t size, bool drop_remainder = false,
                 std::function<Example(std::vector<Example>)> collate = {}) const;
  Pipeline take(int64_t n) const;
  Pipeline skip(int64_t n) const;
  // count < 0 repeats forever.
  Pipeline repeat(int64_t count = -1) const;
  // Runs upstream in a background thread, up to `buffer` elements ahead; errors are rethrown in
  // order, and a dropped stream joins its thread.
  Pipeline prefetch(int64_t buffer = 2) const;
  // Keeps the first complete pass in memory and replays it afterwards.
  Pipeline cache() const;

  std::unique_ptr<Stream> stream() const { return factory_(); }
  // Runs one pass and returns every element.
  std::vector<Example> collect() const;

 private:
  Factory factory_;
};

}  // namespace kiln::data
