#include "kiln/data/dataset.h"

#include <filesystem>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/data/idx.h"
#include "kiln/ops/binary.h"

namespace kiln::data {

Example Dataset::get(int64_t index, const Loc& loc) const {
  if (index < 0 || index >= size())
    fail("Dataset", loc, "expected an index in [0, {}), but got {}", size(), index);
  return get_sample(index, SampleContext{0, 0, index, 0});
}

TensorDataset::TensorDataset(Tensor data, Tensor target, const Loc& loc)
    : data_(std::move(data)), target_(std::move(target)) {
  if (!data_.defined() || data_.dim() < 1)
    fail("TensorDataset", loc, "expected a data tensor of rank >= 1, but got {}",
         data_.defined() ? data_.describe() : std::string("an undefined tensor"));
  if (target_.defined() && (target_.dim() < 1 || target_.dim_size(0) != data_.dim_size(0)))
    fail("TensorDataset", loc, "expected data and target with equal dim 0, but got {} and {}",
         data_.describe(), target_.describe());
}

Example TensorDataset::get_sample(int64_t index, const SampleContext&) const {
  if (index < 0 || index >= size())
    fail("TensorDataset", Loc::current(), "expected an index in [0, {}), but got {}", size(),
         index);
  Example ex;
  ex.data = data_.select(0, index);
  if (target_.defined()) ex.target = target_.select(0, index);
  return ex;
}

TransformDataset::TransformDataset(std::shared_ptr<const Dataset> base, TensorTransform transform)
    : base_(std::move(base)), transform_(std::move(transform)) {}

Example TransformDataset::get_sample(int64_t index, const SampleContext& ctx) const {
  Example ex = base_->get_sample(index, ctx);
  ex.data = transform_(ex.data, ctx);
  return ex;
}

namespace {

// The IDX file `stem` in dir, gzip-compressed (the distributed form) or already unpacked.
std::string find_idx(const std::filesystem::path& dir, const std::string& stem, const Loc& loc) {
  for (const char* suffix : {".gz", ""}) {
    auto path = dir / (stem + suffix);
    if (std::filesystem::exists(path)) return path.string();
  }
  fail("fashion_mnist", loc, "expected {} or {}.gz in {}, but got neither", stem, stem,
       dir.string());
}

}  // namespace

std::shared_ptr<TensorDataset> fashion_mnist(const std::string& dir, const std::string& split,
                                             const Loc& loc) {
  if (split != "train" && split != "test")
    fail("fashion_mnist", loc, "expected split \"train\" or \"test\", but got \"{}\"", split);
  std::string prefix = split == "train" ? "train" : "t10k";
  Tensor images = read_idx(find_idx(dir, prefix + "-images-idx3-ubyte", loc), loc);
  Tensor labels = read_idx(find_idx(dir, prefix + "-labels-idx1-ubyte", loc), loc);
  if (images.dim() != 3 || labels.dim() != 1 || images.dim_size(0) != labels.dim_size(0))
    fail("fashion_mnist", loc, "expected images [N, H, W] and labels [N], but got {} and {}",
         images.describe(), labels.describe());
  Tensor data = div(images.to(DType::Float32), 255.0)
                    .reshape(Shape{images.dim_size(0), 1, images.dim_size(1), images.dim_size(2)});
  return std::make_shared<TensorDataset>(data, labels.to(DType::Int64), loc);
}

}  // namespace kiln::data
