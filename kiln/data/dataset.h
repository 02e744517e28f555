#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/transforms.h"

namespace kiln::data {

// A map-style dataset: size() samples addressed by index. get_sample also receives the
// (seed, epoch, index) context so that random transforms are keyed by it rather than by which
// thread or in which order the sample is produced. Implementations must be safe to call from
// several threads at once (the DataLoader's workers).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get_sample(int64_t index, const SampleContext& ctx) const = 0;
  // The sample with a zero seed and epoch (convenient outside a loader).
  Example get(int64_t index, const Loc& loc = Loc::current()) const;
};

// Rows of `data` (and `target`, if defined) along dim 0, as views.
class TensorDataset final : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor target = Tensor(), const Loc& loc = Loc::current());
  int64_t size() const override { return data_.dim_size(0); }
  Example get_sample(int64_t index, const SampleContext& ctx) const override;
  const Tensor& data() const { return data_; }
  const Tensor& target() const { return target_; }

 private:
  Tensor data_;
  Tensor target_;
};

// `base` with `transform` applied to each sample's data.
class TransformDataset final : public Dataset {
 public:
  TransformDataset(std::shared_ptr<const Dataset> base, TensorTransform transform);
  int64_t size() const override { return base_->size(); }
  Example get_sample(int64_t index, const SampleContext& ctx) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  TensorTransform transform_;
};

// Fashion-MNIST (or MNIST) from `dir` holding the four IDX files, gzip-compressed or plain;
// split is "train" or "test". Images are float32 [N, 1, 28, 28] in [0, 1], labels int64 [N].
std::shared_ptr<TensorDataset> fashion_mnist(const std::string& dir, const std::string& split,
                                             const Loc& loc = Loc::current());

}  // namespace kiln::data
