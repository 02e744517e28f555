#pragma once
#include <optional>
#include <string>

#include "kiln/core/rng.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"
#include "kiln/nn/quantized.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/pool.h"

namespace kiln::nn {

// Layers as torch.nn, with PyTorch 1.13's default initialization unless InitProfile::Keras is
// given. Parameters are public handles (layer.weight); reset_parameters(gen) redraws them.

// y = x W^T + b, W [out, in]. PyTorch: W ~ kaiming_uniform_(a = sqrt(5)), which is
// U(-1/sqrt(in), 1/sqrt(in)), and b ~ U(-1/sqrt(in), 1/sqrt(in)). Keras (Dense): W ~
// glorot_uniform (xavier_uniform_, fans computed the same way), b = 0.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true,
         InitProfile profile = InitProfile::PyTorch, const Loc& loc = Loc::current());
  void reset_parameters(Generator* gen = nullptr);
  Tensor forward(const Tensor& input) override;

  int64_t in_features, out_features;
  InitProfile profile;
  Tensor weight, bias;
  // int8 inference state, set by post-training quantization (Note [quantized layers]).
  std::shared_ptr<LayerQuantization> quantization;
};

// weight [out, in / groups, kh, kw]; initialization as Linear (fan_in = in / groups * kh * kw).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {},
         bool bias = true, InitProfile profile = InitProfile::PyTorch,
         const Loc& loc = Loc::current());
  void reset_parameters(Generator* gen = nullptr);
  Tensor forward(const Tensor& input) override;

  int64_t in_channels, out_channels;
  Size2 kernel_size;
  Conv2dOptions options;
  InitProfile profile;
  Tensor weight, bias;
  // int8 inference state, set by post-training quantization (Note [quantized layers]).
  std::shared_ptr<LayerQuantization> quantization;
};

// weight [in, out / groups, kh, kw]; PyTorch initialization, whose fan_in is read from weight's
// dim 1 (out / groups * kh * kw), exactly as torch computes it for transposed convolutions.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                  ConvTranspose2dOptions options = {}, bool bias = true,
                  const Loc& loc = Loc::current());
  void reset_parameters(Generator* gen = nullptr);
  Tensor forward(const Tensor& input) override;

  int64_t in_channels, out_channels;
  Size2 kernel_size;
  ConvTranspose2dOptions options;
  Tensor weight, bias;
};

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;  // PyTorch convention: weight of the new batch statistic
  bool affine = true;
  bool track_running_stats = true;
};

// Shared by BatchNorm1d/2d: weight 1, bias 0, running_mean 0, running_var 1, num_batches_tracked
// 0 (int64). Training mode uses batch statistics and updates the running ones; eval mode uses the
// running ones (batch statistics when track_running_stats is false).
class BatchNorm : public Module {
 public:
  // InitProfile::Keras gives Keras' BatchNormalization defaults: epsilon 1e-3 and momentum 0.99,
  // which Keras applies to the OLD running value; converted to kiln/PyTorch's convention that is
  // momentum = 1 - 0.99 = 0.01 (see Note [batch-norm momentum] in ops/norm.h). options.eps and
  // options.momentum are ignored under the Keras profile. One difference is not converted:
  // Keras' moving variance uses the biased batch variance, kiln (like PyTorch) the unbiased one.
  BatchNorm(std::string type_name, int64_t expected_rank_min, int64_t expected_rank_max,
            int64_t num_features, BatchNormOptions options, InitProfile profile);
  void reset_parameters();
  void reset_running_stats();
  Tensor forward(const Tensor& input) override;

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t rank_min_, rank_max_;
};

// Input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {},
                       InitProfile profile = InitProfile::PyTorch)
      : BatchNorm("BatchNorm1d", 2, 3, num_features, options, profile) {}
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {},
                       InitProfile profile = InitProfile::PyTorch)
      : BatchNorm("BatchNorm2d", 4, 4, num_features, options, profile) {}
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& input) override;

  Shape normalized_shape;
  double eps;
  Tensor weight, bias;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true,
            const Loc& loc = Loc::current());
  Tensor forward(const Tensor& input) override;

  int64_t num_groups, num_channels;
  double eps;
  Tensor weight, bias;
};

// Active only in training mode (is_training()); draws from gen (default generator when null).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr, const Loc& loc = Loc::current());
  Tensor forward(const Tensor& input) override;

  double p;
  Generator* gen;
};

// Lookup table weight [num_embeddings, embedding_dim] ~ N(0, 1), the padding_idx row zeroed.
// forward takes int64 indices.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt, const Loc& loc = Loc::current());
  void reset_parameters(Generator* gen = nullptr);
  Tensor forward(const Tensor& indices) override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Tensor weight;
};

// --- parameter-free layers ----------------------------------------------------------------------

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override;
};

class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none")
      : Module("GELU"), approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& input) override;
  std::string approximate;
};

class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& input) override;
};

class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) override;
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override;
};

// x for x > 0, negative_slope * x otherwise.
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01)
      : Module("LeakyReLU"), negative_slope(negative_slope) {}
  Tensor forward(const Tensor& input) override;
  double negative_slope;
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : Module("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& input) override;
  int64_t dim;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, MaxPool2dOptions options = {})
      : Module("MaxPool2d"), kernel_size(kernel_size), options(std::move(options)) {}
  Tensor forward(const Tensor& input) override;
  Size2 kernel_size;
  MaxPool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, AvgPool2dOptions options = {})
      : Module("AvgPool2d"), kernel_size(kernel_size), options(std::move(options)) {}
  Tensor forward(const Tensor& input) override;
  Size2 kernel_size;
  AvgPool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size)
      : Module("AdaptiveAvgPool2d"), output_size(output_size) {}
  Tensor forward(const Tensor& input) override;
  Size2 output_size;
};

// Defaults as torch.nn.Flatten: keeps the batch dim.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) override;
  int64_t start_dim, end_dim;
};

}  // namespace kiln::nn
