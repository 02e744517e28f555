#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// Note [model zoo naming]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Parameter and buffer names follow the equivalent PyTorch module so that a PyTorch state_dict
// maps onto these models key for key (and load_state_dict accepts it as is):
//
//   mlp:       nn.Sequential(nn.Flatten(), nn.Linear, nn.ReLU(), ..., nn.Linear)
//              -> "1.weight", "1.bias", "3.weight", ... (children numbered from 0; Flatten is "0",
//              every ReLU takes an index, so Linear layers sit at odd indices).
//   small_cnn: attributes conv1, bn1, conv2, bn2, fc1, fc2 (ReLU/max-pool/flatten are stateless)
//              -> "conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "bn1.running_mean",
//              "bn1.running_var", "bn1.num_batches_tracked", ..., "fc2.weight", "fc2.bias".
//   resnet18:  the CIFAR ResNet of kuangliu/pytorch-cifar (models/resnet.py):
//              "conv1.weight", "bn1.*", "layer{1..4}.{0,1}.conv{1,2}.weight",
//              "layer{1..4}.{0,1}.bn{1,2}.*", "layer{2,3,4}.0.shortcut.0.weight" (1x1 conv),
//              "layer{2,3,4}.0.shortcut.1.*" (its BatchNorm), "linear.weight", "linear.bias".
//              torchvision's names differ in two places: its shortcut is "downsample" and its
//              classifier is "fc"; rename those keys when importing torchvision weights.

// Flatten, then Linear+ReLU for each entry of hidden, then a Linear to classes logits.
std::shared_ptr<Module> mlp(int64_t in_features = 784, std::vector<int64_t> hidden = {256},
                            int64_t classes = 10);

// conv3x3(32, pad 1)-BN-ReLU-maxpool2, conv3x3(64, pad 1)-BN-ReLU-maxpool2, flatten,
// Linear(64 * (image_size / 4)^2, 128), ReLU, Linear(128, classes). 421,834 parameters for
// 1x28x28 inputs and 10 classes.
class SmallCnn : public Module {
 public:
  SmallCnn(int64_t in_channels, int64_t classes, int64_t image_size);
  Tensor forward(const Tensor& input) override;

  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Linear> fc1, fc2;
};

std::shared_ptr<Module> small_cnn(int64_t in_channels = 1, int64_t classes = 10,
                                  int64_t image_size = 28);

// conv3x3(stride)-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU. The shortcut is the identity
// (an empty Sequential, as in PyTorch's CIFAR ResNet) unless the stride or channel count
// changes, when it is Sequential(conv1x1(stride), BN). Convolutions have no bias.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride = 1);
  Tensor forward(const Tensor& input) override;

  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> shortcut;
};

// CIFAR-style ResNet: a 3x3 stride-1 stem without max-pool, four stages of BasicBlocks (64, 128,
// 256, 512 channels; stages 2-4 start with stride 2), adaptive average pool to 1x1, Linear.
class ResNet : public Module {
 public:
  ResNet(std::vector<int64_t> blocks_per_stage, int64_t in_channels, int64_t classes);
  Tensor forward(const Tensor& input) override;

  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<Linear> linear;
};

// ResNet-18 (2 blocks per stage): 11,173,962 parameters for 3 input channels and 10 classes,
// 11,172,810 for 1 channel. Accepts any input of at least 8x8 (e.g. [N, 1, 28, 28] or
// [N, 3, 32, 32]) thanks to the adaptive pool.
std::shared_ptr<Module> resnet18(int64_t in_channels = 3, int64_t classes = 10);

// The zoo by name: "mlp" (one hidden layer of 256), "cnn" (small_cnn) or "resnet18", built for
// inputs [N, in_channels, image_size, image_size] and `classes` logits. An unknown name is an
// Error listing model_names().
std::shared_ptr<Module> make_model(const std::string& name, int64_t in_channels, int64_t image_size,
                                   int64_t classes, const Loc& loc = Loc::current());
std::vector<std::string> model_names();

}  // namespace kiln::nn
