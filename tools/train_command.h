#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace kiln::cli {

// `kiln train`'s flags (see tools/kiln_main.cpp for their help texts).
struct TrainArgs {
  std::string model = "cnn";
  std::string data = "fashion-mnist";  // or cifar10, image-folder, csv
  std::string data_dir;                // empty: the dataset's default directory
  int64_t image_size = 32;             // image-folder
  int64_t channels = 3;                // image-folder
  std::string resize = "stretch";      // image-folder
  std::string label_column = "label";  // csv
  double test_split = 0.2;             // image-folder without test/, csv
  int epochs = 2;
  int64_t batch_size = 128;
  std::string optimizer = "adam";
  double lr = 1e-3;
  double momentum = 0.9;  // sgd only
  double weight_decay = 0.0;
  std::string schedule = "constant";
  double label_smoothing = 0.0;
  bool augment = false;
  int workers = 1;
  int threads = 0;  // 0: all cores
  uint64_t seed = 0;
  int64_t train_samples = 0;      // 0: the whole training split; else its first N samples
  double validation_split = 0.0;  // 0: validate on the test split
  // Callbacks (0 / empty: off). --monitor is what early stopping and the plateau watch.
  std::string monitor = "val_loss";
  int early_stopping = 0;        // patience in epochs
  std::string checkpoint_best;   // metric whose best epoch's weights go to best.safetensors
  int reduce_lr_on_plateau = 0;  // patience in epochs
  double lr_factor = 0.1;        // the plateau multiplies the lr by this
  std::string out = "out/cnn";
  bool resume = false;
  bool overwrite = false;          // replace an earlier run in --out
  bool override_settings = false;  // --override: resume with settings other than the record's
  bool compile = false;  // each step as one compiled graph (Note [compiled training step])
  // Compute precision (Note [training precision]): float32, bf16, fp16 or a Keras policy name.
  std::string precision = "float32";
  std::set<std::string> given;  // the flags typed on the command line ("--lr", ...)
};

// Trains, evaluates on the test split and writes DIR/{checkpoint/, model.safetensors,
// history.csv, curves.svg, summary.txt, metrics.json}. Returns the process exit code.
int run_train(const TrainArgs& args);

// `kiln eval DIR`: rebuilds the model recorded in DIR's checkpoint and evaluates it on the test
// split (loss, accuracy, per-class precision/recall/F1 and the confusion matrix).
int run_eval(const std::string& dir, const std::string& data_dir, int64_t batch_size);

// `kiln graph`'s flags.
struct GraphArgs {
  std::string model = "cnn";
  std::string data = "fashion-mnist";  // whose input shape to trace with
  std::string mode = "eval";           // "eval" or "train"
  std::string out;
  bool optimize = true;  // run the graph optimizer (Note [graph passes])
  bool freeze = false;   // fold the captures as constants (inference)
  std::vector<std::string> skip_passes;
};

// `kiln graph --model M --out DIR`: traces the model with a symbolic batch (nn::function) and
// writes DIR/graph.txt, graph.json, graph.dot and, where Graphviz is installed, graph.svg, after
// the optimizer's passes (unless --no-optimize); it prints what each pass removed.
int run_graph(const GraphArgs& args);

// `kiln summary --model M --data D`: the Keras-style table for the model on the dataset's inputs.
int run_summary(const std::string& model, const std::string& data);

}  // namespace kiln::cli
