#pragma once
// Post-training int8 quantization (the TF Lite converter's job): calibrate a trained model's
// activation ranges on a sample of data, then convert its convolutions and linear layers to int8
// (Note [quantized layers] in kiln/nn/quantized.h, Note [int8 quantization] in
// kiln/ops/quantize.h).
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/data/loader.h"
#include "kiln/nn/module.h"

namespace kiln::train {

// How an activation's range is estimated from the calibration data.
//   kMinMax      the largest magnitude seen (TF Lite's and PyTorch's MinMaxObserver): nothing is
//                clipped, but one outlier widens every step;
//   kPercentile  that percentile of the magnitudes (a 2048-bin histogram whose range doubles as
//                larger values arrive): the rare outliers saturate, the bulk gets finer steps.
enum class ObserverKind { kMinMax, kPercentile };

// "minmax", "percentile"; an Error for other names.
ObserverKind parse_observer(const std::string& name, const Loc& loc = Loc::current());
const char* observer_name(ObserverKind kind);

struct QuantizeOptions {
  int64_t calibration_samples = 1000;  // at most this many samples are run (whole batches)
  ObserverKind observer = ObserverKind::kPercentile;
  double percentile = 99.99;  // kPercentile: in (0, 100]
};

// What quantize did: the layers converted (name -> input dtype, scale, range, folded batch norm),
// the samples seen, and the spec to record (nn::quantization_spec).
struct QuantizeResult {
  int64_t calibration_samples = 0;
  int64_t layers = 0;
  nlohmann::json spec;
  nlohmann::json details;  // per layer: observed min, max, the clip value, weight scale range
};

// Calibrates `model` (in evaluation mode, without gradients) on batches from `calibration` until
// options.calibration_samples samples have been seen, then converts every Conv2d and Linear that
// received input to int8: a convolution run through conv_bn gets its batch norm folded into its
// weights first. Layers that saw no calibration input stay float32 (and are listed as such). The
// model is left in evaluation mode. An Error when the model is already quantized, when no batch
// arrives, or when options are out of range; the model is unchanged then.
QuantizeResult quantize(nn::Module& model, data::DataLoader& calibration,
                        const QuantizeOptions& options = {}, const Loc& loc = Loc::current());

}  // namespace kiln::train
