#pragma once
// The saved-model commands (Note [saved model] in kiln/io/saved_model.h), after TensorFlow's
// saved_model_cli:
//   kiln export RUN_DIR --out BUNDLE   a training run's model as a bundle: serving_default takes
//                                      "x" [batch, C, H, W] (or [batch, F]) and returns "logits";
//                                      assets classes.txt and data_info.json (how inputs were
//                                      prepared), so `kiln predict BUNDLE` needs nothing else;
//   kiln inspect BUNDLE                every signature in saved_model_cli show --all's layout,
//                                      then the metadata;
//   kiln run BUNDLE --input x=a.npy    one signature on arrays from .npy / .npz files, its outputs
//                                      written as NAME.npy and outputs.npz.
#include <string>
#include <vector>

namespace kiln::cli {

struct ExportArgs {
  std::string dir;        // the --out directory of `kiln train` (or of `kiln quantize`)
  std::string out;        // the bundle
  std::string precision;  // empty: the run's own; "float32", "bf16" or "fp16" (autocast)
  std::string weights;    // a .safetensors file of the run instead of its last weights
  bool overwrite = false;
  // Adds the signature "train" (Note [training signatures]): the run's loss and its gradients,
  // so the bundle can be fine-tuned. float32 only.
  bool with_training = false;
};

struct RunArgs {
  std::string bundle;
  std::string signature = "serving_default";
  std::vector<std::string> inputs;  // NAME=FILE.npy, FILE.npz, or FILE.npy for a one-input one
  std::string out;                  // directory for the outputs
};

int run_export(const ExportArgs& args);
int run_inspect(const std::string& bundle, const std::string& signature);
int run_bundle(const RunArgs& args);

// Whether `dir` holds a saved model (its saved_model.json), for commands taking either kind.
bool is_bundle_dir(const std::string& dir);

}  // namespace kiln::cli
