#pragma once
// The ResNet-18 training workload of kiln_h2h's train, trainc and lowp groups: the CIFAR model,
// Adam 1e-3, one batch of 128 (torch_h2h.py's resnet_train_step is its twin).
#include <memory>

#include "kiln/kiln.h"

namespace h2h {

struct ResNetTraining {
  std::shared_ptr<kiln::nn::Module> model = kiln::nn::resnet18(3, 10);
  kiln::optim::Adam opt{model->parameters(), {.lr = 1e-3}};
  kiln::Tensor x = kiln::randn({128, 3, 32, 32});
  kiln::Tensor y = kiln::randint(0, 10, {128});
};

}  // namespace h2h
