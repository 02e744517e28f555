#pragma once
// Loss functions with torch.nn.functional semantics (PyTorch 1.13), defaults included.
#include <cstdint>
#include <string_view>

#include "kiln/core/tensor.h"

namespace kiln {

// How per-element losses are combined. BatchMean (sum / input.dim_size(0)) exists for kl_div only,
// where it is the mathematically correct KL divergence; other losses reject it.
enum class Reduction { None, Mean, Sum, BatchMean };

// "none" / "mean" / "sum" / "batchmean" -> Reduction; anything else is an Error naming it.
Reduction reduction_from_string(std::string_view name, const Loc& loc = Loc::current());
const char* reduction_name(Reduction reduction);

// None: `loss` itself; Mean: mean of all elements; Sum: sum. `op` names the loss in errors.
Tensor reduce_loss(const Tensor& loss, Reduction reduction, std::string_view op = "reduce_loss",
                   const Loc& loc = Loc::current());

// Cross entropy of logits [N, C, d1, ...] (or unbatched [C]) against either
//  - int64 class indices of shape [N, d1, ...] (or []), where ignore_index marks positions that
//    contribute nothing (and are excluded from Mean's normalizer), or
//  - floating class probabilities of logits' shape and dtype (ignore_index must stay negative).
// `weight` (optional, [C], logits' dtype) rescales each class. Mean divides by the summed weight
// of the non-ignored targets (their count without weights) for class indices, and by the number
// of positions for probabilities. label_smoothing in [0, 1] mixes the target with the uniform
// distribution exactly as PyTorch 1.13 does (including its weight/ignore_index interplay).
// One fused kernel computes log-softmax and the loss; the gradient is
// (softmax(x) * sum_c(y) - y) * scale with y the weighted (smoothed) target distribution.
// Class indices out of [0, C) that are not ignore_index are an Error naming the value and C.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                     double label_smoothing = 0.0, const Loc& loc = Loc::current());

// Negative log likelihood of log-probabilities [N, C, d1, ...] (or [C]) at int64 class indices
// [N, d1, ...] (or []); weight, ignore_index and Mean's normalizer as in cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = Tensor(),
                int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                const Loc& loc = Loc::current());

// Elementwise regression losses; input and target broadcast (as PyTorch, which warns).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                const Loc& loc = Loc::current());
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
               const Loc& loc = Loc::current());
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta = 0 gives l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::Mean, double beta = 1.0,
                      const Loc& loc = Loc::current());
// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); delta must be positive.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0, const Loc& loc = Loc::current());

// -w (t log p + (1 - t) log(1 - p)) with each log clamped to >= -100 like PyTorch. target has
// probs' shape; weight (optional) broadcasts to it.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target,
                            const Tensor& weight = Tensor(), Reduction reduction = Reduction::Mean,
                            const Loc& loc = Loc::current());
// The same on logits, computed stably as (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x).
// pos_weight (optional) broadcasts against target (usually [C], the last dim).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(),
                                        Reduction reduction = Reduction::Mean,
                                        const Loc& loc = Loc::current());

// KL(target || exp(input)) pointwise: input holds log-probabilities; target probabilities (or
// log-probabilities with log_target). Reduction::BatchMean divides the sum by input.dim_size(0).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false, const Loc& loc = Loc::current());

namespace reference {

// The unfused decomposition of cross_entropy into log_softmax, nll_loss and the smoothing term,
// mirroring PyTorch's own composite; tests compare the fused op with it (values and gradients).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                     double label_smoothing = 0.0, const Loc& loc = Loc::current());

}  // namespace reference
}  // namespace kiln
