// Registry samples of the ops defined in kiln/ops/loss_classification.cpp (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "kiln/ops/loss.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<Tensor> one(Tensor t) {
  return {std::move(t)};
}

Tensor longs(const std::vector<int64_t>& values, Shape shape) {
  return tensor<int64_t>(values, shape);
}

OpSample ce_sample(std::string label, std::vector<Tensor> in, int64_t ignore_index,
                   Reduction reduction, double eps, std::string torch, std::vector<int> grads) {
  const bool weighted = in.size() > 2;
  auto fn = [=](const std::vector<Tensor>& x) {
    return one(cross_entropy(x[0], x[1], weighted ? x[2] : Tensor(), ignore_index, reduction, eps));
  };
  return {std::move(label), std::move(in), fn, "F.cross_entropy(" + torch + ")", std::move(grads)};
}

KILN_REGISTER_OP_SAMPLES("cross_entropy", [] {
  const Tensor w4 = sample_tensor({4}, 304, 0.5, 2);
  return std::vector<OpSample>{
      ce_sample("indices_mean", {sample_tensor({4, 5}, 301, -2, 2), longs({1, 0, 4, 2}, {4})}, -100,
                Reduction::Mean, 0.0, "a0, a1", {0}),
      ce_sample("weight_ignore_sum",
                {sample_tensor({5, 4}, 302, -2, 2), longs({0, 3, 1, 1, 2}, {5}), w4}, 1,
                Reduction::Sum, 0.0, "a0, a1, weight=a2, ignore_index=1, reduction='sum'", {0}),
      ce_sample("weight_ignore_smoothing_mean",
                {sample_tensor({6, 4}, 303, -2, 2), longs({0, 3, 1, 2, 1, 2}, {6}), w4}, 1,
                Reduction::Mean, 0.1, "a0, a1, weight=a2, ignore_index=1, label_smoothing=0.1",
                {0}),
      ce_sample("ignore_smoothing_mean",
                {sample_tensor({3, 5}, 305, -2, 2).t(), longs({2, 0, 0, 1, 0}, {5})}, 0,
                Reduction::Mean, 0.3, "a0, a1, ignore_index=0, label_smoothing=0.3", {0}),
      ce_sample(
          "spatial_smoothing_none",
          {sample_tensor({2, 3, 2, 2}, 306, -2, 2), longs({0, 2, 1, 1, 2, 0, -100, 1}, {2, 2, 2})},
          -100, Reduction::None, 0.2, "a0, a1, reduction='none', label_smoothing=0.2", {0}),
      ce_sample("unbatched", {sample_tensor({5}, 307, -2, 2), longs({3}, {})}, -100,
                Reduction::Mean, 0.0, "a0, a1", {0}),
      ce_sample("probs_weight_smoothing_mean",
                {sample_tensor({3, 4}, 308, -2, 2), sample_tensor({3, 4}, 309, 0, 1), w4}, -100,
                Reduction::Mean, 0.15, "a0, a1, weight=a2, label_smoothing=0.15", {0, 1, 2}),
      ce_sample("probs_spatial_none",
                {sample_tensor({2, 3, 2}, 310, -2, 2), sample_tensor({2, 3, 2}, 311, 0, 1)}, -100,
                Reduction::None, 0.0, "a0, a1, reduction='none'", {0, 1}),
  };
});

OpSample nll_sample(std::string label, std::vector<Tensor> in, int64_t ignore_index,
                    Reduction reduction, std::string torch) {
  const bool weighted = in.size() > 2;
  auto fn = [=](const std::vector<Tensor>& x) {
    return one(nll_loss(x[0], x[1], weighted ? x[2] : Tensor(), ignore_index, reduction));
  };
  return {std::move(label), std::move(in), fn, "F.nll_loss(" + torch + ")", {0}};
}

KILN_REGISTER_OP_SAMPLES("nll_loss", [] {
  return std::vector<OpSample>{
      nll_sample("mean", {sample_tensor({4, 5}, 321, -3, -0.1), longs({4, 0, 2, 2}, {4})}, -100,
                 Reduction::Mean, "a0, a1"),
      nll_sample("weight_ignore_none",
                 {sample_tensor({5, 3}, 322, -3, -0.1), longs({0, 2, 1, 2, 1}, {5}),
                  sample_tensor({3}, 323, 0.5, 2)},
                 2, Reduction::None, "a0, a1, weight=a2, ignore_index=2, reduction='none'"),
      nll_sample("weight_ignore_mean",
                 {sample_tensor({5, 3}, 324, -3, -0.1), longs({0, 2, 1, 2, 1}, {5}),
                  sample_tensor({3}, 325, 0.5, 2)},
                 2, Reduction::Mean, "a0, a1, weight=a2, ignore_index=2"),
      nll_sample(
          "spatial_sum",
          {sample_tensor({2, 3, 2, 2}, 326, -3, -0.1), longs({0, 2, 1, 1, 2, 0, 0, 1}, {2, 2, 2})},
          -100, Reduction::Sum, "a0, a1, reduction='sum'"),
  };
});

}  // namespace

}  // namespace kiln
