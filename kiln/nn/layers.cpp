#include "kiln/nn/layers.h"

#include <cmath>

#include "kiln/core/grad_mode.h"
#include "kiln/graph/tracer.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/embedding.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

namespace {

void check_positive(const char* layer, const char* what, int64_t v, const Loc& loc) {
  if (v <= 0) fail(layer, loc, "expected {} > 0, but got {}", what, v);
}

// PyTorch's reset_parameters of Linear and _ConvNd: kaiming_uniform_(a = sqrt(5)) gives
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias uses the same bound.
void torch_default_init(const Tensor& weight, const Tensor& bias, Generator* gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::FanIn, "leaky_relu", gen);
  if (bias.defined()) {
    int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound, gen);
  }
}

// Keras: glorot_uniform kernel, zero bias.
void keras_default_init(const Tensor& weight, const Tensor& bias, Generator* gen) {
  init::xavier_uniform_(weight, 1.0, gen);
  if (bias.defined()) init::zeros_(bias);
}

}  // namespace

// --- Linear ------------------------------------------------------------------------------------

Linear::Linear(int64_t in, int64_t out, bool with_bias, InitProfile profile, const Loc& loc)
    : Module("Linear"), in_features(in), out_features(out), profile(profile) {
  check_positive("Linear", "in_features", in, loc);
  check_positive("Linear", "out_features", out, loc);
  weight = register_parameter("weight", empty({out, in}), true, loc);
  if (with_bias) bias = register_parameter("bias", empty({out}), true, loc);
  reset_parameters();
}

void Linear::reset_parameters(Generator* gen) {
  if (profile == InitProfile::Keras)
    keras_default_init(weight, bias, gen);
  else
    torch_default_init(weight, bias, gen);
}

Tensor Linear::forward(const Tensor& input) {
  if (input.dim() < 1 || input.dim_size(-1) != in_features)
    fail("Linear", Loc::current(), "expected input [..., {}], but got {}", in_features,
         input.describe());
  if (quantization) {
    if (quantization->active) return quantized_forward(*this, *quantization, input, false);
    if (quantization->observer) quantization->observer->observe(input);
  }
  return linear(input, weight, bias);
}

// --- Conv2d ------------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in, int64_t out, Size2 kernel, Conv2dOptions opts, bool with_bias,
               InitProfile profile, const Loc& loc)
    : Module("Conv2d"),
      in_channels(in),
      out_channels(out),
      kernel_size(kernel),
      options(std::move(opts)),
      profile(profile) {
  check_positive("Conv2d", "in_channels", in, loc);
  check_positive("Conv2d", "out_channels", out, loc);
  check_positive("Conv2d", "groups", options.groups, loc);
  if (in % options.groups != 0 || out % options.groups != 0)
    fail("Conv2d", loc, "expected in_channels {} and out_channels {} divisible by groups {}", in,
         out, options.groups);
  weight = register_parameter("weight", empty({out, in / options.groups, kernel.h, kernel.w}), true,
                              loc);
  if (with_bias) bias = register_parameter("bias", empty({out}), true, loc);
  reset_parameters();
}

void Conv2d::reset_parameters(Generator* gen) {
  if (profile == InitProfile::Keras)
    keras_default_init(weight, bias, gen);
  else
    torch_default_init(weight, bias, gen);
}

Tensor Conv2d::forward(const Tensor& input) {
  if (quantization) {
    if (quantization->active) {
      // Note [quantized layers]: its int8 weights include the batch norm's scale.
      if (quantization->folded_batch_norm)
        fail("Conv2d", Loc::current(),
             "this convolution was quantized with its batch norm folded into its weights, so it "
             "runs only through conv_bn(conv, bn, x), not alone");
      return quantized_forward(*this, *quantization, input, false);
    }
    if (quantization->observer) quantization->observer->observe(input);
  }
  return conv2d(input, weight, bias, options);
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Size2 kernel, ConvTranspose2dOptions opts,
                                 bool with_bias, const Loc& loc)
    : Module("ConvTranspose2d"),
      in_channels(in),
      out_channels(out),
      kernel_size(kernel),
      options(opts) {
  check_positive("ConvTranspose2d", "in_channels", in, loc);
  check_positive("ConvTranspose2d", "out_channels", out, loc);
  check_positive("ConvTranspose2d", "groups", options.groups, loc);
  if (in % options.groups != 0 || out % options.groups != 0)
    fail("ConvTranspose2d", loc,
         "expected in_channels {} and out_channels {} divisible by groups {}", in, out,
         options.groups);
  weight = register_parameter("weight", empty({in, out / options.groups, kernel.h, kernel.w}), true,
                              loc);
  if (with_bias) bias = register_parameter("bias", empty({out}), true, loc);
  reset_parameters();
}

void ConvTranspose2d::reset_parameters(Generator* gen) {
  torch_default_init(weight, bias, gen);
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  return conv_transpose2d(input, weight, bias, options);
}

// --- normalization -----------------------------------------------------------------------------

BatchNorm::BatchNorm(std::string type_name, int64_t rank_min, int64_t rank_max, int64_t n,
                     BatchNormOptions opts, InitProfile profile)
    : Module(std::move(type_name)),
      num_features(n),
      options(opts),
      rank_min_(rank_min),
      rank_max_(rank_max) {
  check_positive(this->type_name().c_str(), "num_features", n, Loc::current());
  if (profile == InitProfile::Keras) {
    options.eps = 1e-3;
    options.momentum = 1.0 - 0.99;  // Keras momentum 0.99 weights the old value
  }
  if (options.affine) {
    weight = register_parameter("weight", empty({n}));
    bias = register_parameter("bias", empty({n}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", empty({n}));
    running_var = register_buffer("running_var", empty({n}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {DType::Int64}));
  }
  reset_parameters();
}

void BatchNorm::reset_running_stats() {
  if (!options.track_running_stats) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNorm::forward(const Tensor& input) {
  if (input.dim() < rank_min_ || input.dim() > rank_max_ || input.dim_size(1) != num_features)
    fail(type_name(), Loc::current(),
         "expected input of rank {}{} with {} channels (dim 1), but got {}", rank_min_,
         rank_max_ == rank_min_ ? "" : fmt::format("-{}", rank_max_), num_features,
         input.describe());
  bool track = options.track_running_stats;
  // Not on a shape-only meta forward (summary), but in a trace, whose graph counts every batch.
  if (is_training() && track && (!input.is_meta() || graph::Tracer::active())) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(ones({}, {DType::Int64}));
  }
  bool use_batch_stats = is_training() || !track;
  return batch_norm(input, track ? running_mean : Tensor(), track ? running_var : Tensor(), weight,
                    bias, use_batch_stats, options.momentum, options.eps);
}

LayerNorm::LayerNorm(Shape shape, double eps, bool elementwise_affine)
    : Module("LayerNorm"), normalized_shape(std::move(shape)), eps(eps) {
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape, weight, bias, eps);
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine, const Loc& loc)
    : Module("GroupNorm"), num_groups(groups), num_channels(channels), eps(eps) {
  check_positive("GroupNorm", "num_groups", groups, loc);
  if (channels % groups != 0)
    fail("GroupNorm", loc, "expected num_channels divisible by num_groups, but got {} and {}",
         channels, groups);
  if (affine) {
    weight = register_parameter("weight", ones({channels}), true, loc);
    bias = register_parameter("bias", zeros({channels}), true, loc);
  }
}

Tensor GroupNorm::forward(const Tensor& input) {
  return group_norm(input, num_groups, weight, bias, eps);
}

// --- dropout, embedding ------------------------------------------------------------------------

Dropout::Dropout(double p, Generator* gen, const Loc& loc) : Module("Dropout"), p(p), gen(gen) {
  if (!(p >= 0.0 && p <= 1.0)) fail("Dropout", loc, "expected p in [0, 1], but got {}", p);
}

Tensor Dropout::forward(const Tensor& input) {
  return dropout(input, p, is_training(), gen);
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad, const Loc& loc)
    : Module("Embedding"), num_embeddings(num), embedding_dim(dim) {
  check_positive("Embedding", "num_embeddings", num, loc);
  check_positive("Embedding", "embedding_dim", dim, loc);
  if (pad) {
    if (*pad < -num || *pad >= num)
      fail("Embedding", loc, "expected padding_idx in [{}, {}), but got {}", -num, num, *pad);
    padding_idx = *pad < 0 ? *pad + num : *pad;
  }
  weight = register_parameter("weight", empty({num, dim}), true, loc);
  reset_parameters();
}

void Embedding::reset_parameters(Generator* gen) {
  init::normal_(weight, 0.0, 1.0, gen);
  if (padding_idx) {
    NoGradGuard no_grad;
    select(weight, 0, *padding_idx).fill_(0.0);
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  return embedding(weight, indices, padding_idx);
}

// --- parameter-free layers ---------------------------------------------------------------------

Tensor ReLU::forward(const Tensor& input) {
  return relu(input);
}
Tensor GELU::forward(const Tensor& input) {
  return gelu(input, approximate);
}
Tensor SiLU::forward(const Tensor& input) {
  return silu(input);
}
Tensor Sigmoid::forward(const Tensor& input) {
  return sigmoid(input);
}
Tensor Tanh::forward(const Tensor& input) {
  return tanh(input);
}

Tensor LeakyReLU::forward(const Tensor& input) {
  return where(gt(input, 0.0), input, mul(input, negative_slope));
}

Tensor Softmax::forward(const Tensor& input) {
  return softmax(input, dim);
}
Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool2d(input, kernel_size, options);
}
Tensor AvgPool2d::forward(const Tensor& input) {
  return avg_pool2d(input, kernel_size, options);
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return adaptive_avg_pool2d(input, output_size);
}
Tensor Flatten::forward(const Tensor& input) {
  return flatten(input, start_dim, end_dim);
}

}  // namespace kiln::nn
