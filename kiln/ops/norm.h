#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

// Normalization layers as torch.nn.functional. Statistics accumulate in double in a fixed order;
// the variance used to normalize is the biased one (divide by N), as in PyTorch. weight and bias
// may be undefined (Tensor()); when given, they must have x's dtype.

// Note [batch-norm momentum]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// kiln follows PyTorch: after a training step
//     running_mean = (1 - momentum) * running_mean + momentum * batch_mean
//     running_var  = (1 - momentum) * running_var  + momentum * batch_var_unbiased
// so momentum is the weight of the NEW batch statistic (default 0.1). Keras'
// BatchNormalization(momentum=m) weights the OLD value by m: running = m * running + (1 - m) *
// batch, i.e. Keras m corresponds to kiln/PyTorch momentum 1 - m (Keras' default 0.99 is 0.01
// here). Keras also uses the biased batch variance for its moving variance and defaults
// epsilon to 1e-3; the Keras-style API converts all of this explicitly, nothing here guesses.
//
// batch_norm(x [N, C, ...], ...):
//   training = true: normalizes with the batch's statistics over every dim but 1 (the gradient
//     flows through them) and, when running_mean / running_var are defined, updates them in place
//     as above (no gradient is recorded, their version counters are bumped). running_var gets the
//     unbiased variance, so N * spatial must be > 1 to update it.
//   training = false: normalizes with running_mean / running_var, which must be defined.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5, const Loc& loc = Loc::current());

namespace detail {
// batch_norm's evaluation mode (training = false) after its argument checks: the op
// "batch_norm_eval".
Tensor batch_norm_eval(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double eps, const Loc& loc);
}  // namespace detail

// y = x * scale[c] + shift[c] over the channel dim (1) of x [N, C, ...], in one pass: batch_norm
// in evaluation mode, with scale and shift folded from the running statistics. scale and shift
// have shape [C] and x's dtype.
Tensor channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                      const Loc& loc = Loc::current());

// batch_norm's first-order gradient (training mode) as one fused op: returns {grad_input,
// grad_weight, grad_bias} for the batch statistics mean and var (biased) that the forward
// normalized x with; weight may be undefined (grad_weight is then the gradient a weight of ones
// would get). grad_mean / grad_var, when defined, are gradients reaching those statistics.
// batch_norm's backward calls this unless create_graph is set; the op is not differentiable
// itself (create_graph differentiates batch_norm through its decomposition instead).
std::vector<Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                        const Tensor& var, const Tensor& weight, double eps = 1e-5,
                                        const Tensor& grad_mean = Tensor(),
                                        const Tensor& grad_var = Tensor(),
                                        const Loc& loc = Loc::current());

// Normalizes over the trailing dims given by normalized_shape (which must equal x's trailing
// sizes); weight and bias have shape normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5,
                  const Loc& loc = Loc::current());

// x [N, C, ...]: channels split into num_groups groups (C % num_groups == 0); each (sample,
// group) is normalized over its channels and spatial positions. weight and bias have shape [C].
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5,
                  const Loc& loc = Loc::current());

namespace reference {

// Unfused decompositions into primitive ops (mean, var, rsqrt, ...), which tests compare the
// fused kernels and their gradients with. batch_norm here never touches running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double eps = 1e-5,
                  const Loc& loc = Loc::current());
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5, const Loc& loc = Loc::current());
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5, const Loc& loc = Loc::current());

}  // namespace reference
}  // namespace kiln
