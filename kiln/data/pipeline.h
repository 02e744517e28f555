#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
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
  // Keeps the first complete pass in `filename` and replays it on later passes, also in later
  // runs of the program (see Note [file cache]); an empty filename means cache().
  Pipeline cache(const std::string& filename, const Loc& loc = Loc::current()) const;
  // tf.data's interleave: maps up to `cycle_length` input elements to sub-pipelines with `fn`
  // and takes `block_length` consecutive elements from each in turn; an exhausted sub-pipeline's
  // slot is refilled from the next input element in place. Deterministic (see Note [interleave]).
  Pipeline interleave(std::function<Pipeline(const Example&)> fn, int64_t cycle_length,
                      int64_t block_length = 1, const Loc& loc = Loc::current()) const;

  std::unique_ptr<Stream> stream() const { return factory_(); }
  // Runs one pass and returns every element.
  std::vector<Example> collect() const;

 private:
  Factory factory_;
};

// Note [file cache]
// ~~~~~~~~~~~~~~~~~
// cache(filename) behaves like tf.data's: a pass that finds `filename` reads the elements from it
// and never runs the stages above; otherwise the pass runs them and streams each element to
// "<filename>.tmp.<pid>", which is renamed to `filename` only when the pass reaches its end (see
// Note [atomic write] in kiln/io/atomic_file.h). A pass stopped early (take(), an exception, a
// dropped stream) deletes the temp file, so no later pass can mistake a partial cache for a
// complete one (a killed process may leave its temp file behind, never a file under the cache's
// name). While a pass of this process writes `filename`, other concurrent passes that would
// write it run their upstream stages without writing. The file is not tied to the upstream
// stages: delete it when they change.
//
// Format (little-endian): the 8 bytes "KILNCCH1"; per element the tag byte 1, a flags byte
// (1: data defined, 2: target defined), each defined tensor as {u8 dtype (kiln's DType value),
// u8 rank, rank x i64 dims, the contiguous bytes}, then the CRC-32 of the element's bytes from
// its tag on; finally the tag byte 0, u64 element count and the 8 bytes "KILNCEND". Reading
// checks the magic and the end marker before the first element, each header against the file
// size before allocating, and each CRC, so a truncated or corrupt file is a kiln::Error naming
// the file and the byte offset, never a crash.

}  // namespace kiln::data
