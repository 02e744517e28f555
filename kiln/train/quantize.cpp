#include "kiln/train/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/quantized.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv_bn_fold.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::train {

ObserverKind parse_observer(const std::string& name, const Loc& loc) {
  if (name == "minmax") return ObserverKind::kMinMax;
  if (name == "percentile") return ObserverKind::kPercentile;
  fail("quantize", loc, "expected an observer among minmax, percentile, but got \"{}\"", name);
}

const char* observer_name(ObserverKind kind) {
  return kind == ObserverKind::kMinMax ? "minmax" : "percentile";
}

namespace {

// The range of one layer's inputs: min, max and a histogram of magnitudes over [0, range) whose
// range doubles (merging bin pairs) when a larger magnitude arrives, so it needs one pass.
class RangeObserver final : public nn::ActivationObserver {
 public:
  static constexpr int kBins = 2048;

  void observe(const Tensor& input) override {
    const Tensor x = contiguous(to_dtype(input, DType::Float32));
    const auto* p = static_cast<const float*>(x.raw_data());
    const int64_t n = x.numel();
    float lo = min_, hi = max_, amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(p[i])) continue;
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
      amax = std::max(amax, std::abs(p[i]));
    }
    min_ = lo, max_ = hi;
    if (amax > range_) grow(amax);
    if (range_ == 0.0) {
      zeros_ += n;
      return;
    }
    const double per_bin = kBins / range_;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(p[i])) continue;
      auto b = static_cast<int64_t>(std::abs(p[i]) * per_bin);
      ++bins_[static_cast<size_t>(std::min<int64_t>(b, kBins - 1))];
    }
    count_ += n;
  }

  bool seen() const { return min_ <= max_; }
  double min() const { return min_; }
  double max() const { return max_; }

  // The magnitude below which `percentile` % of the observed values lie (the upper edge of the
  // bin where the cumulative count reaches it).
  double clip(ObserverKind kind, double percentile) const {
    const double amax = std::max(std::abs(min_), std::abs(max_));
    if (kind == ObserverKind::kMinMax || range_ == 0.0) return amax;
    const double total = static_cast<double>(count_ + zeros_);
    double cum = static_cast<double>(zeros_);
    for (int b = 0; b < kBins; ++b) {
      cum += static_cast<double>(bins_[static_cast<size_t>(b)]);
      if (cum >= total * percentile / 100.0)
        return std::min(amax, range_ * static_cast<double>(b + 1) / kBins);
    }
    return amax;
  }

 private:
  void grow(float amax) {
    if (range_ == 0.0) {
      range_ = amax;
      return;
    }
    while (range_ < amax) {
      for (int b = 0; b < kBins / 2; ++b)
        bins_[static_cast<size_t>(b)] =
            bins_[static_cast<size_t>(2 * b)] + bins_[static_cast<size_t>(2 * b + 1)];
      std::fill(bins_.begin() + kBins / 2, bins_.end(), 0);
      range_ *= 2.0;
    }
  }

  float min_ = std::numeric_limits<float>::infinity();
  float max_ = -std::numeric_limits<float>::infinity();
  double range_ = 0.0;
  int64_t count_ = 0, zeros_ = 0;  // zeros_: values seen while every magnitude was 0
  std::vector<int64_t> bins_ = std::vector<int64_t>(kBins, 0);
};

struct Candidate {
  std::string name;
  nn::Module* module;
  std::shared_ptr<RangeObserver> observer;
};

// The weight and bias the int8 layer computes with: the batch norm folded into a convolution
// that conv_bn ran with one (in evaluation mode, with running statistics).
std::pair<Tensor, Tensor> float_weight_and_bias(nn::Module& m, const nn::BatchNorm* bn) {
  if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) {
    if (bn == nullptr) return {conv->weight, conv->bias};
    auto [scale, shift] = conv_bn_fold(bn->running_mean, bn->running_var, bn->weight, bn->bias,
                                       conv->bias, bn->options.eps);
    return {mul(conv->weight, reshape(scale, {-1, 1, 1, 1})), shift};
  }
  auto& linear = dynamic_cast<nn::Linear&>(m);
  return {linear.weight, linear.bias};
}

// Writes the int8 weight, int32 bias and output scales of layer q (Note [int8 quantization]),
// returning the range of the weight scales.
std::pair<double, double> write_int8(const nn::LayerQuantization& q, const Tensor& weight,
                                     const Tensor& bias) {
  const Tensor w = contiguous(to_dtype(weight, DType::Float64));
  const int64_t out = w.dim_size(0), per = w.numel() / std::max<int64_t>(out, 1);
  const std::vector<double> wv = w.to_vector<double>();
  std::vector<double> bv(static_cast<size_t>(out), 0.0);
  if (bias.defined()) bv = to_dtype(bias, DType::Float64).to_vector<double>();
  std::vector<int8_t> wq(wv.size());
  std::vector<int32_t> bq(static_cast<size_t>(out));
  std::vector<float> os(static_cast<size_t>(out));
  double smin = std::numeric_limits<double>::infinity(), smax = 0.0;
  for (int64_t o = 0; o < out; ++o) {
    double amax = 0.0;
    for (int64_t i = 0; i < per; ++i) amax = std::max(amax, std::abs(wv[o * per + i]));
    const double sw = amax > 0.0 ? amax / 127.0 : 1.0;
    smin = std::min(smin, sw), smax = std::max(smax, sw);
    for (int64_t i = 0; i < per; ++i)
      wq[o * per + i] =
          static_cast<int8_t>(std::clamp(std::nearbyint(wv[o * per + i] / sw), -127.0, 127.0));
    const double acc_scale = q.input_scale * sw;
    bq[o] = static_cast<int32_t>(
        std::clamp(std::nearbyint(bv[o] / acc_scale), -2147483647.0, 2147483647.0));
    os[o] = static_cast<float>(acc_scale);
  }
  NoGradGuard no_grad;
  Tensor(q.weight_q).copy_(tensor(std::vector<int64_t>(wq.begin(), wq.end()), w.shape()));
  Tensor(q.bias_q).copy_(tensor(std::vector<int64_t>(bq.begin(), bq.end()), Shape{out}));
  Tensor(q.out_scale).copy_(tensor(std::vector<float>(os.begin(), os.end()), Shape{out}));
  return {smin, smax};
}

}  // namespace

QuantizeResult quantize(nn::Module& model, data::DataLoader& calibration,
                        const QuantizeOptions& options, const Loc& loc) {
  if (options.calibration_samples < 1)
    fail("quantize", loc, "expected calibration_samples >= 1, but got {}",
         options.calibration_samples);
  if (!(options.percentile > 0.0 && options.percentile <= 100.0))
    fail("quantize", loc, "expected a percentile in (0, 100], but got {}", options.percentile);
  std::vector<Candidate> candidates;
  for (const auto& [name, m] : model.named_modules()) {
    if (dynamic_cast<nn::Conv2d*>(m) == nullptr && dynamic_cast<nn::Linear*>(m) == nullptr)
      continue;
    if (nn::layer_quantization(*m) != nullptr)
      fail("quantize", loc, "layer \"{}\" is already quantized; quantize the float model", name);
    candidates.push_back({name, m, std::make_shared<RangeObserver>()});
  }
  if (candidates.empty())
    fail("quantize", loc, "the model has no Conv2d or Linear layer to quantize");

  // Calibration: float forward passes with an observer on every candidate.
  auto slot = [](nn::Module* m) -> std::shared_ptr<nn::LayerQuantization>& {
    return *nn::quantization_slot(*m);
  };
  for (Candidate& c : candidates) {
    auto q = std::make_shared<nn::LayerQuantization>();
    q->observer = c.observer;
    slot(c.module) = q;
  }
  QuantizeResult result;
  try {
    model.eval();
    NoGradGuard no_grad;
    for (const data::Example& batch : calibration) {
      model(batch.data, loc);
      result.calibration_samples += batch.data.dim_size(0);
      if (result.calibration_samples >= options.calibration_samples) break;
    }
  } catch (...) {
    for (Candidate& c : candidates) slot(c.module).reset();
    throw;
  }
  std::vector<const nn::BatchNorm*> folded(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    folded[i] = slot(candidates[i].module)->calibrated_with;
    slot(candidates[i].module).reset();
  }
  if (result.calibration_samples == 0) fail("quantize", loc, "the calibration data gave no batch");

  // Conversion. A folded batch norm is recorded by name (Note [stripped float weights]).
  std::map<const nn::Module*, std::string> names;
  for (const auto& [name, m] : model.named_modules()) names[m] = name;
  result.details = nlohmann::json::object();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    const RangeObserver& obs = *c.observer;
    if (!obs.seen()) {
      result.details[c.name] = {{"quantized", false}, {"why", "saw no calibration input"}};
      continue;
    }
    const double clip = obs.clip(options.observer, options.percentile);
    const bool unsigned_input = obs.min() >= 0.0;
    const double scale = clip > 0.0 ? clip / (unsigned_input ? 255.0 : 127.0) : 1.0;
    const auto [weight, bias] = float_weight_and_bias(*c.module, folded[i]);
    nn::LayerQuantization& q = nn::make_quantized(
        *c.module, unsigned_input ? DType::UInt8 : DType::Int8, scale, folded[i] != nullptr, loc);
    if (folded[i] != nullptr) q.batch_norm = names[folded[i]];
    const auto [wmin, wmax] = write_int8(q, weight, bias);
    result.details[c.name] = {{"quantized", true},
                              {"input_dtype", unsigned_input ? "uint8" : "int8"},
                              {"observed_min", obs.min()},
                              {"observed_max", obs.max()},
                              {"clip", clip},
                              {"input_scale", scale},
                              {"weight_scale_min", wmin},
                              {"weight_scale_max", wmax},
                              {"folded_batch_norm", folded[i] != nullptr}};
    ++result.layers;
  }
  result.spec = nn::quantization_spec(model);
  return result;
}

}  // namespace kiln::train
