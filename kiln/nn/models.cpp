#include "kiln/nn/models.h"

#include <utility>

#include "kiln/core/error.h"
#include "kiln/nn/conv_bn.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/pool.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

namespace {

std::shared_ptr<Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride, bool bias) {
  return std::make_shared<Conv2d>(in, out, 3, Conv2dOptions{.stride = stride, .padding = 1}, bias);
}

}  // namespace

std::shared_ptr<Module> mlp(int64_t in_features, std::vector<int64_t> hidden, int64_t classes) {
  if (in_features <= 0 || classes <= 0)
    fail("mlp", Loc::current(), "expected positive in_features and classes, but got {} and {}",
         in_features, classes);
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<Flatten>());
  int64_t width = in_features;
  for (int64_t h : hidden) {
    net->push_back(std::make_shared<Linear>(width, h));
    net->push_back(std::make_shared<ReLU>());
    width = h;
  }
  net->push_back(std::make_shared<Linear>(width, classes));
  return net;
}

SmallCnn::SmallCnn(int64_t in_channels, int64_t classes, int64_t image_size) : Module("SmallCnn") {
  // Two 2x2 pools floor the spatial size twice, exactly as nn.MaxPool2d(2) does.
  int64_t side = image_size / 2 / 2;
  if (side <= 0)
    fail("small_cnn", Loc::current(), "expected image_size >= 4, but got {}", image_size);
  conv1 = register_module("conv1", conv3x3(in_channels, 32, 1, true));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(32));
  conv2 = register_module("conv2", conv3x3(32, 64, 1, true));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(64));
  fc1 = register_module("fc1", std::make_shared<Linear>(64 * side * side, 128));
  fc2 = register_module("fc2", std::make_shared<Linear>(128, classes));
}

Tensor SmallCnn::forward(const Tensor& input) {
  Tensor x = max_pool2d(conv_bn(*conv1, *bn1, input, Tensor(), true), 2);
  x = max_pool2d(conv_bn(*conv2, *bn2, x, Tensor(), true), 2);
  x = relu((*fc1)(flatten(x, 1)));
  return (*fc2)(x);
}

std::shared_ptr<Module> small_cnn(int64_t in_channels, int64_t classes, int64_t image_size) {
  return std::make_shared<SmallCnn>(in_channels, classes, image_size);
}

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride) : Module("BasicBlock") {
  conv1 = register_module("conv1", conv3x3(in_planes, planes, stride, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1, false));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  shortcut = register_module("shortcut", std::make_shared<Sequential>());
  if (stride != 1 || in_planes != planes) {
    shortcut->push_back(
        std::make_shared<Conv2d>(in_planes, planes, 1, Conv2dOptions{.stride = stride}, false));
    shortcut->push_back(std::make_shared<BatchNorm2d>(planes));
  }
}

Tensor BasicBlock::forward(const Tensor& input) {
  Tensor out = conv_bn(*conv1, *bn1, input, Tensor(), true);
  // An empty shortcut is the identity; skipping the call keeps it out of summary's rows. The
  // projection (conv, bn) goes through conv_bn too unless the Sequential itself is observed.
  Tensor skip = input;
  auto conv = shortcut->size() == 2 ? std::dynamic_pointer_cast<Conv2d>((*shortcut)[0]) : nullptr;
  auto bn = shortcut->size() == 2 ? std::dynamic_pointer_cast<BatchNorm>((*shortcut)[1]) : nullptr;
  if (conv && bn && !shortcut->has_forward_hooks())
    skip = conv_bn(*conv, *bn, input);
  else if (shortcut->size() != 0)
    skip = (*shortcut)(input);
  return conv_bn(*conv2, *bn2, out, skip, true);
}

ResNet::ResNet(std::vector<int64_t> blocks_per_stage, int64_t in_channels, int64_t classes)
    : Module("ResNet") {
  if (blocks_per_stage.size() != 4)
    fail("ResNet", Loc::current(), "expected 4 stages, but got {}", blocks_per_stage.size());
  conv1 = register_module("conv1", conv3x3(in_channels, 64, 1, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  int64_t in_planes = 64;
  auto stage = [&](const char* name, int64_t planes, int64_t blocks, int64_t stride) {
    auto seq = std::make_shared<Sequential>();
    for (int64_t i = 0; i < blocks; ++i) {
      seq->push_back(std::make_shared<BasicBlock>(in_planes, planes, i == 0 ? stride : 1));
      in_planes = planes;
    }
    return register_module(name, seq);
  };
  layer1 = stage("layer1", 64, blocks_per_stage[0], 1);
  layer2 = stage("layer2", 128, blocks_per_stage[1], 2);
  layer3 = stage("layer3", 256, blocks_per_stage[2], 2);
  layer4 = stage("layer4", 512, blocks_per_stage[3], 2);
  linear = register_module("linear", std::make_shared<Linear>(512, classes));
}

Tensor ResNet::forward(const Tensor& input) {
  Tensor x = conv_bn(*conv1, *bn1, input, Tensor(), true);
  x = (*layer4)((*layer3)((*layer2)((*layer1)(x))));
  x = flatten(adaptive_avg_pool2d(x, 1), 1);
  return (*linear)(x);
}

std::shared_ptr<Module> resnet18(int64_t in_channels, int64_t classes) {
  return std::make_shared<ResNet>(std::vector<int64_t>{2, 2, 2, 2}, in_channels, classes);
}

std::vector<std::string> model_names() {
  return {"mlp", "cnn", "resnet18"};
}

std::shared_ptr<Module> make_model(const std::string& name, int64_t in_channels, int64_t image_size,
                                   int64_t classes, const Loc& loc) {
  if (in_channels < 1 || image_size < 1 || classes < 1)
    fail("make_model", loc,
         "expected positive in_channels, image_size and classes, but got {}, {} and {}",
         in_channels, image_size, classes);
  if (name == "mlp") return mlp(in_channels * image_size * image_size, {256}, classes);
  if (name == "cnn") {
    if (image_size % 4 != 0)
      fail("make_model", loc, "expected an image size divisible by 4 for \"cnn\", but got {}",
           image_size);
    return small_cnn(in_channels, classes, image_size);
  }
  if (name == "resnet18") {
    if (image_size < 8)
      fail("make_model", loc, "expected images of at least 8x8 for \"resnet18\", but got {}",
           image_size);
    return resnet18(in_channels, classes);
  }
  fail("make_model", loc, "expected a model name among mlp, cnn, resnet18, but got \"{}\"", name);
}

}  // namespace kiln::nn
