// Registry samples of the ops defined in kiln/ops/loss.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/loss.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<OpSample> pair_samples(
    const std::string& name, double low, double high,
    const std::function<Tensor(const Tensor&, const Tensor&, Reduction)>& f,
    const std::string& extra = "") {
  auto call = [f](Reduction r) {
    return [f, r](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x[0], x[1], r)}; };
  };
  const std::string t = "F." + name + "(a0, a1" + extra;
  return {
      {"mean",
       {sample_tensor({3, 4}, 401, low, high), sample_tensor({3, 4}, 402, low, high)},
       call(Reduction::Mean),
       t + ")"},
      {"broadcast_none",
       {sample_tensor({3, 1}, 403, low, high), sample_tensor({4}, 404, low, high)},
       call(Reduction::None),
       t + ", reduction='none')"},
      {"transposed_sum",
       {sample_tensor({4, 3}, 405, low, high).t(), sample_tensor({3, 4}, 406, low, high)},
       call(Reduction::Sum),
       t + ", reduction='sum')"},
  };
}

KILN_REGISTER_OP_SAMPLES("mse_loss", [] {
  return pair_samples("mse_loss", -1, 1,
                      [](auto& a, auto& b, Reduction r) { return mse_loss(a, b, r); });
});
KILN_REGISTER_OP_SAMPLES("l1_loss", [] {
  return pair_samples("l1_loss", -1, 1,
                      [](auto& a, auto& b, Reduction r) { return l1_loss(a, b, r); });
});
// Inputs in [-2, 2] put differences on both sides of beta / delta (kinks are improbable).
KILN_REGISTER_OP_SAMPLES("smooth_l1_loss", [] {
  auto s = pair_samples("smooth_l1_loss", -2, 2,
                        [](auto& a, auto& b, Reduction r) { return smooth_l1_loss(a, b, r); });
  auto beta = pair_samples(
      "smooth_l1_loss", -2, 2,
      [](auto& a, auto& b, Reduction r) { return smooth_l1_loss(a, b, r, 0.5); }, ", beta=0.5");
  s.push_back(beta[1]);
  s.back().label = "beta_broadcast_none";
  return s;
});
KILN_REGISTER_OP_SAMPLES("huber_loss", [] {
  auto s = pair_samples("huber_loss", -2, 2,
                        [](auto& a, auto& b, Reduction r) { return huber_loss(a, b, r); });
  auto delta = pair_samples(
      "huber_loss", -2, 2, [](auto& a, auto& b, Reduction r) { return huber_loss(a, b, r, 0.7); },
      ", delta=0.7");
  s.push_back(delta[0]);
  s.back().label = "delta_mean";
  return s;
});

KILN_REGISTER_OP_SAMPLES("binary_cross_entropy", [] {
  auto call = [](bool weighted, Reduction r) {
    return [=](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{binary_cross_entropy(x[0], x[1], weighted ? x[2] : Tensor(), r)};
    };
  };
  return std::vector<OpSample>{
      {"mean",
       {sample_tensor({3, 4}, 411, 0.05, 0.95), sample_tensor({3, 4}, 412, 0, 1)},
       call(false, Reduction::Mean),
       "F.binary_cross_entropy(a0, a1)"},
      {"weight_broadcast_none",
       {sample_tensor({2, 3}, 413, 0.05, 0.95), sample_tensor({2, 3}, 414, 0, 1),
        sample_tensor({3}, 415, 0.5, 2)},
       call(true, Reduction::None),
       "F.binary_cross_entropy(a0, a1, weight=a2, reduction='none')",
       {0, 1}},
      {"weight_sum",
       {sample_tensor({4}, 416, 0.05, 0.95), sample_tensor({4}, 417, 0, 1),
        sample_tensor({4}, 418, 0.5, 2)},
       call(true, Reduction::Sum),
       "F.binary_cross_entropy(a0, a1, weight=a2, reduction='sum')",
       {0, 1}},
  };
});

KILN_REGISTER_OP_SAMPLES("binary_cross_entropy_with_logits", [] {
  auto call = [](bool weighted, bool pos, Reduction r) {
    return [=](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{binary_cross_entropy_with_logits(
          x[0], x[1], weighted ? x[2] : Tensor(), pos ? x[weighted ? 3 : 2] : Tensor(), r)};
    };
  };
  const std::string f = "F.binary_cross_entropy_with_logits(a0, a1";
  return std::vector<OpSample>{
      {"mean",
       {sample_tensor({3, 4}, 421, -3, 3), sample_tensor({3, 4}, 422, 0, 1)},
       call(false, false, Reduction::Mean),
       f + ")"},
      {"weight_pos_weight_none",
       {sample_tensor({2, 3}, 423, -3, 3), sample_tensor({2, 3}, 424, 0, 1),
        sample_tensor({2, 1}, 425, 0.5, 2), sample_tensor({3}, 426, 0.5, 3)},
       call(true, true, Reduction::None),
       f + ", weight=a2, pos_weight=a3, reduction='none')",
       {0, 1}},
      {"pos_weight_large_logits_sum",
       {sample_tensor({2, 4}, 427, -60, 60), sample_tensor({2, 4}, 428, 0, 1),
        sample_tensor({4}, 429, 0.5, 3)},
       call(false, true, Reduction::Sum),
       f + ", pos_weight=a2, reduction='sum')",
       {0, 1}},
  };
});

KILN_REGISTER_OP_SAMPLES("kl_div", [] {
  auto call = [](Reduction r, bool log_target) {
    return [=](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{kl_div(x[0], x[1], r, log_target)};
    };
  };
  return std::vector<OpSample>{
      {"batchmean",
       {sample_tensor({3, 4}, 431, -3, -0.1), sample_tensor({3, 4}, 432, 0.05, 1)},
       call(Reduction::BatchMean, false),
       "F.kl_div(a0, a1, reduction='batchmean')"},
      {"broadcast_none",
       {sample_tensor({2, 3}, 433, -3, -0.1), sample_tensor({3}, 434, 0.05, 1)},
       call(Reduction::None, false),
       "F.kl_div(a0, a1, reduction='none')"},
      {"log_target_sum",
       {sample_tensor({2, 3}, 435, -3, -0.1), sample_tensor({2, 3}, 436, -3, -0.1)},
       call(Reduction::Sum, true),
       "F.kl_div(a0, a1, reduction='sum', log_target=True)"},
      {"mean",
       {sample_tensor({4}, 437, -3, -0.1), sample_tensor({4}, 438, 0.05, 1)},
       call(Reduction::Mean, false),
       "F.kl_div(a0, a1, reduction='mean')"},
  };
});

}  // namespace

}  // namespace kiln
