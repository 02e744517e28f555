#pragma once
// `kiln quantize DIR`: int8 post-training quantization of a training run's model.
#include <cstdint>
#include <string>

namespace kiln::cli {

struct QuantizeArgs {
  std::string dir;  // the run to quantize (its checkpoint)
  std::string out;  // where the quantized copy goes; empty: DIR-int8
  int64_t calibration_samples = 1000;
  std::string observer = "percentile";  // minmax, percentile
  double percentile = 99.99;
  uint64_t seed = 0;  // which training samples calibrate
  int64_t batch_size = 500;
  std::string data_dir;
  bool overwrite = false;
  // Keep the float32 weights the int8 layers were made from (Note [stripped float weights]);
  // without it they are stripped, and the copy is about a quarter of the float model's size.
  bool keep_float = false;
  // Also writes the quantized model as an int8 saved-model bundle here (as kiln export would).
  std::string bundle;
};

int run_quantize(const QuantizeArgs& args);

}  // namespace kiln::cli
