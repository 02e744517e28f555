#pragma once
// `kiln predict DIR --input FILE|DIR ...`: the classes a trained run's model gives new inputs
// (images, .npy arrays, CSV rows), prepared as the run prepared its training data, with the top-k
// class names and probabilities printed and optionally written as JSON or CSV.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

struct PredictArgs {
  std::string dir;                  // the --out directory of `kiln train`
  std::vector<std::string> inputs;  // files, or directories of them
  int64_t top_k = 3;
  std::string out;      // .json or .csv; empty: print only
  std::string weights;  // a .safetensors file of the run (best.safetensors); empty: final weights
  int64_t batch_size = 64;
};

int run_predict(const PredictArgs& args);

}  // namespace kiln::cli
