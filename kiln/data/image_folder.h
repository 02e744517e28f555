#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/image.h"

namespace kiln::data {

struct ImageFolderOptions {
  // A file is a sample when its lower-cased name ends with one of these (so ".JPG" counts).
  std::vector<std::string> extensions = {".png", ".jpg", ".jpeg"};
  // RGB (the default, as torchvision's PIL loader) lets grayscale and color files share a batch.
  ImageMode mode = ImageMode::RGB;
  // (H, W): resize every image with bilinear interpolation, align_corners=False and no antialias
  // (torch.nn.functional.interpolate, not torchvision's PIL resize).
  std::optional<std::pair<int64_t, int64_t>> size;
  // Without `size`, an image whose shape differs from sample 0's is an error naming both files,
  // unless this is true (e.g. for transforms that crop to a fixed size themselves).
  bool allow_mixed_sizes = false;
  // Float32: pixels / 255 in [0, 1], as fashion_mnist and cifar10; UInt8: the decoded bytes.
  DType dtype = DType::Float32;
};

// Note [image folder]
// ~~~~~~~~~~~~~~~~~~~
// torchvision.datasets.ImageFolder's layout and labels: every subdirectory of root is a class,
// labels are the indices of the class names sorted by byte value, and a class's samples are the
// matching files anywhere below its directory (symlinks followed), in the order of
// (directory, file name) as torchvision's sorted(os.walk(...)) gives. A class without any image is
// an error, as in torchvision. Scanning happens in the constructor; decoding happens in
// get_sample, so it is lazy and runs in the DataLoader's workers in parallel (get_sample is
// thread-safe). A sample is {data: [C, H, W], target: int64 scalar label}.
class ImageFolder final : public Dataset {
 public:
  explicit ImageFolder(const std::string& root, ImageFolderOptions options = {},
                       const Loc& loc = Loc::current());

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Example get_sample(int64_t index, const SampleContext& ctx) const override;

  // Class names in label order.
  const std::vector<std::string>& class_names() const { return classes_; }
  // The label of a class name; throws a kiln::Error listing the classes when absent.
  int64_t class_index(const std::string& name, const Loc& loc = Loc::current()) const;
  const std::string& path(int64_t index, const Loc& loc = Loc::current()) const;
  int64_t label(int64_t index, const Loc& loc = Loc::current()) const;
  const std::string& root() const { return root_; }

 private:
  struct Sample {
    std::string path;
    int64_t label;
  };
  void check_index(int64_t index, const Loc& loc) const;
  Tensor load(int64_t index) const;
  const Shape& reference_shape() const;

  std::string root_;
  ImageFolderOptions options_;
  Loc loc_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  mutable std::once_flag reference_once_;
  mutable Shape reference_shape_;
};

std::shared_ptr<ImageFolder> image_folder(const std::string& root, ImageFolderOptions options = {},
                                          const Loc& loc = Loc::current());

}  // namespace kiln::data
