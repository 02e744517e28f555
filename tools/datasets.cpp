#include "tools/datasets.h"

#include "kiln/core/error.h"
#include "kiln/data/cifar.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"

namespace kiln::cli {
namespace {

std::shared_ptr<data::TensorDataset> normalized(const data::TensorDataset& ds,
                                                const DataInfo& info) {
  const Shape shape{1, info.channels, 1, 1};
  Tensor mean = tensor<float>(info.mean, shape);
  Tensor std = tensor<float>(info.std, shape);
  return std::make_shared<data::TensorDataset>(div(sub(ds.data(), mean), std), ds.target());
}

}  // namespace

DataInfo data_info(const std::string& name) {
  if (name == "fashion-mnist")
    return DataInfo{1,
                    28,
                    {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                     "Sneaker", "Bag", "Ankle boot"},
                    {0.2860f},
                    {0.3530f}};
  if (name == "cifar10")
    return DataInfo{
        3,
        32,
        {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"},
        {0.4914f, 0.4822f, 0.4465f},
        {0.2470f, 0.2435f, 0.2616f}};
  throw Error("[kiln] expected --data fashion-mnist or cifar10, but got \"" + name + "\"");
}

std::string default_data_dir(const std::string& name) {
  if (name == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  return "";
}

ImageData load_image_data(const std::string& name, std::string dir, bool with_train) {
  ImageData d;
  d.info = data_info(name);
  if (dir.empty()) dir = default_data_dir(name);
  if (dir.empty() && name == "cifar10")
    throw Error(
        "[kiln] --data cifar10 needs --data-dir: the directory of CIFAR-10's binary version "
        "(cifar-10-batches-bin, with data_batch_1.bin ... data_batch_5.bin and test_batch.bin, as "
        "unpacked from https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz), or its parent");
  if (dir.empty())
    throw Error("[kiln] --data " + name + " needs --data-dir (the directory of its files)");
  auto read = [&](const std::string& split) {
    return name == "cifar10" ? data::cifar10(dir, split) : data::fashion_mnist(dir, split);
  };
  if (with_train) d.train = normalized(*read("train"), d.info);
  d.test = normalized(*read("test"), d.info);
  return d;
}

}  // namespace kiln::cli
