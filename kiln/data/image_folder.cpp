#include "kiln/data/image_folder.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/interpolate.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has_extension(const std::string& name, const std::vector<std::string>& extensions) {
  std::string low = lower(name);
  return std::any_of(extensions.begin(), extensions.end(), [&](const std::string& ext) {
    return low.size() >= ext.size() && low.compare(low.size() - ext.size(), ext.size(), ext) == 0;
  });
}

std::string shape_text(const Shape& s) {
  return fmt::format("{}", fmt::join(s, "x"));
}

// The image files below `dir` in torchvision's order: sorted by (directory, file name).
std::vector<std::string> list_images(const fs::path& dir,
                                     const std::vector<std::string>& extensions, const Loc& loc) {
  std::vector<std::pair<std::string, std::string>> found;
  std::error_code ec;
  auto options = fs::directory_options::follow_directory_symlink;
  for (fs::recursive_directory_iterator it(dir, options, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code file_ec;
    if (!it->is_regular_file(file_ec)) continue;
    std::string name = it->path().filename().string();
    if (has_extension(name, extensions))
      found.emplace_back(it->path().parent_path().string(), name);
  }
  if (ec) fail("ImageFolder", loc, "cannot list '{}': {}", dir.string(), ec.message());
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  paths.reserve(found.size());
  for (auto& [parent, name] : found) paths.push_back((fs::path(parent) / name).string());
  return paths;
}

// Bilinear resize of uint8 [C, H, W] in float; uint8 output is rounded and clamped.
Tensor resize(const Tensor& image, std::pair<int64_t, int64_t> size, DType dtype) {
  InterpolateOptions options;
  options.size = size;
  options.mode = "bilinear";
  Tensor x = interpolate(image.to(DType::Float32).unsqueeze(0), options).squeeze(0).contiguous();
  if (dtype == DType::Float32) return div(x, 255.0);
  Tensor out = empty(x.shape(), {DType::UInt8});
  const float* src = x.data<float>();
  uint8_t* dst = out.data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i)
    dst[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(src[i]), 0.0f, 255.0f));
  return out;
}

}  // namespace

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options, const Loc& loc)
    : root_(root), options_(std::move(options)), loc_(loc) {
  if (options_.dtype != DType::Float32 && options_.dtype != DType::UInt8)
    fail("ImageFolder", loc, "expected dtype float32 or uint8, but got {}",
         dtype_name(options_.dtype));
  if (options_.size && (options_.size->first < 1 || options_.size->second < 1))
    fail("ImageFolder", loc, "expected a positive size (H, W), but got ({}, {})",
         options_.size->first, options_.size->second);
  if (options_.extensions.empty())
    fail("ImageFolder", loc, "expected at least one file extension, but got none");
  for (auto& ext : options_.extensions) ext = lower(ext);
  std::error_code ec;
  if (!fs::is_directory(root_, ec))
    fail("ImageFolder", loc, "expected '{}' to be a directory of class folders, but it is {}",
         root_, fs::exists(root_, ec) ? "not a directory" : "missing");
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code dir_ec;
    if (it->is_directory(dir_ec)) classes_.push_back(it->path().filename().string());
  }
  if (ec) fail("ImageFolder", loc, "cannot list '{}': {}", root_, ec.message());
  if (classes_.empty())
    fail("ImageFolder", loc, "expected class subdirectories in '{}', but found none", root_);
  std::sort(classes_.begin(), classes_.end());
  std::vector<std::string> empty_classes;
  for (size_t label = 0; label < classes_.size(); ++label) {
    auto paths = list_images(fs::path(root_) / classes_[label], options_.extensions, loc);
    if (paths.empty()) empty_classes.push_back(classes_[label]);
    for (auto& p : paths) samples_.push_back({std::move(p), static_cast<int64_t>(label)});
  }
  if (!empty_classes.empty())
    fail("ImageFolder", loc,
         "expected image files ({}) in every class of '{}', but found none in [{}]",
         fmt::join(options_.extensions, ", "), root_, fmt::join(empty_classes, ", "));
}

void ImageFolder::check_index(int64_t index, const Loc& loc) const {
  if (index < 0 || index >= size())
    fail("ImageFolder", loc, "expected an index in [0, {}), but got {}", size(), index);
}

int64_t ImageFolder::class_index(const std::string& name, const Loc& loc) const {
  auto it = std::lower_bound(classes_.begin(), classes_.end(), name);
  if (it == classes_.end() || *it != name)
    fail("ImageFolder", loc, "expected a class name in [{}], but got \"{}\"",
         fmt::join(classes_, ", "), name);
  return it - classes_.begin();
}

const std::string& ImageFolder::path(int64_t index, const Loc& loc) const {
  check_index(index, loc);
  return samples_[index].path;
}

int64_t ImageFolder::label(int64_t index, const Loc& loc) const {
  check_index(index, loc);
  return samples_[index].label;
}

Tensor ImageFolder::load(int64_t index) const {
  return decode_image(samples_[index].path, options_.mode, loc_);
}

const Shape& ImageFolder::reference_shape() const {
  std::call_once(reference_once_, [&] { reference_shape_ = load(0).shape(); });
  return reference_shape_;
}

Example ImageFolder::get_sample(int64_t index, const SampleContext&) const {
  check_index(index, loc_);
  NoGradGuard no_grad;
  Tensor image = load(index);
  Example ex;
  ex.target = scalar_tensor(static_cast<double>(samples_[index].label), {DType::Int64});
  if (options_.size) {
    ex.data = resize(image, *options_.size, options_.dtype);
    return ex;
  }
  if (!options_.allow_mixed_sizes && index != 0 && image.shape() != reference_shape())
    fail("ImageFolder", loc_,
         "expected every image to have the shape of sample 0 ('{}', {}), but '{}' is {} (C x H x "
         "W); "
         "set ImageFolderOptions::size to resize, or allow_mixed_sizes",
         samples_[0].path, shape_text(reference_shape()), samples_[index].path,
         shape_text(image.shape()));
  ex.data = options_.dtype == DType::UInt8 ? image : div(image.to(DType::Float32), 255.0);
  return ex;
}

std::shared_ptr<ImageFolder> image_folder(const std::string& root, ImageFolderOptions options,
                                          const Loc& loc) {
  return std::make_shared<ImageFolder>(root, std::move(options), loc);
}

}  // namespace kiln::data
