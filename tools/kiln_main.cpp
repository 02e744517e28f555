// The `kiln` command: train a model from the zoo on a known dataset or the user's own data,
// evaluate a training directory, classify new inputs with it, watch runs live in the browser
// (board), print a model summary, write a model's traced graph, export a run as a saved-model
// bundle and inspect or run one. `kiln --help` and
// `kiln <command> --help` list the flags.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "tools/board/board_server.h"
#include "tools/bundle_commands.h"
#include "tools/config_file.h"
#include "tools/flag_checks.h"
#include "tools/predict_command.h"
#include "tools/quantize_command.h"
#include "tools/train_command.h"

int main(int argc, char** argv) {
  using kiln::cli::GraphArgs;
  using kiln::cli::non_negative_integer;
  using kiln::cli::non_negative_number;
  using kiln::cli::number_in;
  using kiln::cli::positive_number;
  using kiln::cli::TrainArgs;
  // Line-buffered even into a file or a pipe: a log shows each line as it is written and keeps
  // it when the run is killed (a block-buffered log stayed empty for a whole epoch).
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  CLI::App app{"kiln: train, evaluate and inspect models"};
  app.require_subcommand(1);

  TrainArgs t;
  CLI::App* train = app.add_subcommand("train", "train a model and evaluate it on the test split");
  train->add_option("--model", t.model, "mlp, cnn or resnet18")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet18"}))
      ->capture_default_str();
  train
      ->add_option("--data", t.data,
                   "fashion-mnist, cifar10, image-folder (your images: a subfolder per class) or "
                   "csv (your table: numeric columns and a label column)")
      ->check(CLI::IsMember({"fashion-mnist", "cifar10", "image-folder", "csv"}))
      ->capture_default_str();
  train->add_option("--data-dir", t.data_dir,
                    "directory of the dataset's files; for image-folder the directory of class "
                    "folders (or of train/ and test/ ones); for csv the file");
  train->add_option("--image-size", t.image_size, "image-folder: images become N x N")
      ->check(CLI::Range(int64_t{8}, int64_t{1024}))
      ->capture_default_str();
  train->add_option("--channels", t.channels, "image-folder: 1 (grayscale) or 3 (RGB)")
      ->check(CLI::IsMember({1, 3}))
      ->capture_default_str();
  train
      ->add_option("--resize", t.resize,
                   "image-folder: stretch (to N x N) or crop (shorter side to N, centre square)")
      ->check(CLI::IsMember({"stretch", "crop"}))
      ->capture_default_str();
  train->add_option("--label-column", t.label_column, "csv: the column holding class labels 0..K-1")
      ->capture_default_str();
  train
      ->add_option("--test-split", t.test_split,
                   "image-folder without test/ and csv: this fraction, drawn with --seed, is held "
                   "out as the test split")
      ->check(number_in(0.01, 0.9))
      ->capture_default_str();
  train->add_option("--epochs", t.epochs, "epochs to train (in total, when resuming)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  train->add_option("--batch-size", t.batch_size, "samples per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  train->add_option("--optimizer", t.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  train->add_option("--lr", t.lr, "learning rate (peak rate for --schedule onecycle)")
      ->check(positive_number())
      ->capture_default_str();
  train->add_option("--momentum", t.momentum, "SGD momentum")
      ->check(number_in(0.0, 1.0))
      ->capture_default_str();
  train->add_option("--weight-decay", t.weight_decay, "weight decay (decoupled for adamw)")
      ->check(non_negative_number())
      ->capture_default_str();
  train->add_option("--schedule", t.schedule, "learning-rate schedule: constant, cosine, onecycle")
      ->check(CLI::IsMember({"constant", "cosine", "onecycle"}))
      ->capture_default_str();
  train->add_option("--label-smoothing", t.label_smoothing, "cross-entropy label smoothing")
      ->check(number_in(0.0, 1.0))
      ->capture_default_str();
  train->add_flag("--augment", t.augment, "random crop (padding size/8) and horizontal flip");
  train->add_option("--workers", t.workers, "data-loading threads (0: in the training thread)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  train->add_option("--threads", t.threads, "compute threads (0: all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  train->add_option("--seed", t.seed, "seed of initialization, shuffling and augmentation")
      ->check(non_negative_integer())
      ->capture_default_str();
  train
      ->add_option("--train-samples", t.train_samples,
                   "train on the first N training samples only (0: all)")
      ->check(non_negative_integer());
  train
      ->add_option("--validation-split", t.validation_split,
                   "hold out this last fraction of the training split for validation (Keras' "
                   "validation_split); 0 validates on the test split")
      ->check(number_in(0.0, 0.99));
  train
      ->add_option("--monitor", t.monitor,
                   "the metric --early-stopping and --reduce-lr-on-plateau watch: val_loss, "
                   "val_accuracy, loss, accuracy")
      ->capture_default_str();
  train
      ->add_option("--early-stopping", t.early_stopping,
                   "stop after this many epochs without improvement of --monitor (0: off)")
      ->check(CLI::Range(0, 100000));
  train->add_option("--checkpoint-best", t.checkpoint_best,
                    "keep the weights of the epoch with the best value of this metric (val_loss, "
                    "val_accuracy, ...) in best.safetensors");
  train
      ->add_option("--reduce-lr-on-plateau", t.reduce_lr_on_plateau,
                   "multiply the lr by --lr-factor after this many epochs without improvement of "
                   "--monitor (0: off)")
      ->check(CLI::Range(0, 100000));
  train->add_option("--lr-factor", t.lr_factor, "the factor of --reduce-lr-on-plateau")
      ->check(number_in(0.001, 0.999))
      ->capture_default_str();
  std::string config_path;
  train->add_option("--config", config_path,
                    "read settings from a JSON file ({\"lr\": 0.01, \"batch_size\": 64, ...}, or "
                    "a run's config.json); flags on the command line win");
  train->add_option("--out", t.out, "directory for the checkpoint, weights, curves and logs")
      ->capture_default_str();
  train->add_flag("--resume", t.resume,
                  "continue the run in --out from its checkpoint, with the settings it recorded "
                  "(flags given must agree, unless --override); a new run when --out is empty");
  train->add_flag("--overwrite", t.overwrite,
                  "replace an earlier run in --out (without it, an earlier run is never replaced)");
  train->add_flag("--override", t.override_settings,
                  "with --resume: continue with flags that differ from the run's record (a "
                  "schedule is then stretched to a new --epochs from where the run is)");
  train
      ->add_option("--precision", t.precision,
                   "compute precision: float32, bf16 (alias mixed_bfloat16) or fp16 (alias "
                   "mixed_float16, with dynamic loss scaling); parameters stay float32. Where the "
                   "CPU has no native kernels for it, kiln warns and keeps float32")
      ->check(CLI::IsMember(
          {"float32", "bf16", "bfloat16", "mixed_bfloat16", "fp16", "float16", "mixed_float16"}))
      ->capture_default_str();
  train->add_flag("--compile", t.compile,
                  "run each step as one compiled graph (forward, loss, gradients), as Keras' "
                  "jit_compile");

  std::string eval_dir, eval_data_dir;
  int64_t eval_batch = 500;
  CLI::App* eval = app.add_subcommand("eval", "evaluate a directory written by `kiln train`");
  eval->add_option("dir", eval_dir, "the --out directory of a training run")->required();
  eval->add_option("--data-dir", eval_data_dir, "override the dataset directory");
  eval->add_option("--batch-size", eval_batch, "samples per batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));

  kiln::cli::QuantizeArgs q;
  CLI::App* quantize = app.add_subcommand(
      "quantize",
      "int8 post-training quantization of a training run's model, with the accuracy before and "
      "after");
  quantize->add_option("dir", q.dir, "the --out directory of a training run")->required();
  quantize->add_option("--out", q.out, "directory for the quantized copy (default: DIR-int8)");
  quantize->add_option("--bundle", q.bundle,
                       "also write the int8 model as a saved-model bundle here (kiln export)");
  quantize
      ->add_option("--calibration-samples", q.calibration_samples,
                   "training samples whose activations set the int8 ranges")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  quantize->add_option("--observer", q.observer, "how ranges are estimated: minmax or percentile")
      ->check(CLI::IsMember({"minmax", "percentile"}))
      ->capture_default_str();
  quantize->add_option("--percentile", q.percentile, "the percentile observer's percentile")
      ->check(CLI::Range(50.0, 100.0))
      ->capture_default_str();
  quantize->add_option("--seed", q.seed, "which training samples calibrate")->capture_default_str();
  quantize->add_option("--data-dir", q.data_dir, "override the dataset directory");
  quantize->add_option("--batch-size", q.batch_size, "samples per batch when testing")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  quantize->add_flag("--overwrite", q.overwrite, "replace an earlier quantized copy at --out");
  quantize->add_flag("--keep-float", q.keep_float,
                     "keep the float32 weights of the int8 layers in the copy (by default they "
                     "are stripped: the copy is smaller, but cannot run those layers in float32)");

  kiln::cli::PredictArgs p;
  CLI::App* predict = app.add_subcommand(
      "predict",
      "classify new inputs with a trained run's model (top-k classes and probabilities)");
  predict
      ->add_option("dir", p.dir, "the --out directory of a training run, or a bundle (kiln export)")
      ->required();
  predict
      ->add_option("--input", p.inputs,
                   "images (.png, .jpg), .npy arrays or .csv rows, or directories of them")
      ->required();
  predict->add_option("--top-k", p.top_k, "classes shown per input")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  predict->add_option("--out", p.out, "also write the predictions to a .json or .csv file");
  predict->add_option("--weights", p.weights,
                      "weights to use instead of the run's last ones (e.g. DIR/best.safetensors)");
  predict->add_option("--batch-size", p.batch_size, "inputs per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();

  kiln::cli::ExportArgs x;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "write a training run's model as a saved-model bundle (runs without its code)");
  export_cmd->add_option("dir", x.dir, "the --out directory of kiln train (or kiln quantize)")
      ->required();
  export_cmd->add_option("--out", x.out, "the bundle directory to write")->required();
  export_cmd
      ->add_option("--precision", x.precision,
                   "float32, bf16 or fp16 (traced under autocast); default: the run's own")
      ->check(CLI::IsMember({"float32", "bf16", "fp16", "int8"}));
  export_cmd->add_option("--weights", x.weights,
                         "weights to export instead of the run's last ones (DIR/best.safetensors)");
  export_cmd->add_flag("--overwrite", x.overwrite, "replace a bundle already at --out");
  export_cmd->add_flag("--with-training", x.with_training,
                       "add a \"train\" signature (loss and gradients) for fine-tuning (float32)");

  std::string inspect_dir, inspect_signature;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "show a bundle's signatures (as saved_model_cli show --all), files and metadata");
  inspect->add_option("bundle", inspect_dir, "a saved-model directory (kiln export)")->required();
  inspect->add_option("--signature", inspect_signature, "show only this signature");

  kiln::cli::RunArgs r;
  CLI::App* run_cmd =
      app.add_subcommand("run", "run one signature of a bundle on .npy/.npz arrays");
  run_cmd->add_option("bundle", r.bundle, "a saved-model directory (kiln export)")->required();
  run_cmd->add_option("--signature", r.signature, "the signature to run")->capture_default_str();
  run_cmd
      ->add_option("--input", r.inputs,
                   "NAME=FILE.npy, FILE.npz (its arrays by input name), or FILE.npy when the "
                   "signature has one input")
      ->required();
  run_cmd->add_option("--out", r.out, "directory for NAME.npy per output and outputs.npz")
      ->required();

  kiln::cli::BoardArgs b;
  CLI::App* board = app.add_subcommand(
      "board", "serve a live dashboard of training runs (curves, lr, confusion matrix, config)");
  board->add_option("runs", b.dirs, "run directories (the --out of kiln train), overlaid")
      ->required();
  board->add_option("--host", b.host, "address to listen on")->capture_default_str();
  board->add_option("--port", b.port, "port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();

  std::string summary_model = "cnn", summary_data = "fashion-mnist";
  CLI::App* summary = app.add_subcommand("summary", "print a model's layers, shapes and sizes");
  summary->add_option("--model", summary_model, "mlp, cnn or resnet18")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet18"}))
      ->capture_default_str();
  summary->add_option("--data", summary_data, "dataset whose input shape to use")
      ->check(CLI::IsMember({"fashion-mnist", "cifar10"}))
      ->capture_default_str();

  GraphArgs g;
  CLI::App* graph =
      app.add_subcommand("graph", "trace a model and write its graph (text, JSON, DOT, SVG)");
  graph->add_option("--model", g.model, "mlp, cnn or resnet18")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet18"}))
      ->capture_default_str();
  graph->add_option("--data", g.data, "dataset whose input shape to trace with")
      ->check(CLI::IsMember({"fashion-mnist", "cifar10"}))
      ->capture_default_str();
  graph->add_option("--mode", g.mode, "trace the model in eval or train mode")
      ->check(CLI::IsMember({"eval", "train"}))
      ->capture_default_str();
  graph->add_option("--out", g.out, "directory for graph.txt, graph.json, graph.dot, graph.svg")
      ->required();
  graph->add_flag("!--no-optimize", g.optimize, "write the graph as traced, without the passes");
  graph->add_flag("--freeze", g.freeze,
                  "treat parameters and buffers as constants and fold them (inference)");
  graph
      ->add_option("--skip-passes", g.skip_passes,
                   "passes to leave out (simplify, cse, conv_bn, linear, fold, dce, fuse, layout, "
                   "hoist, remat)")
      ->delimiter(',');

  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);

  // --config: the file's settings become arguments before the typed ones (tools/config_file.h).
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() > 2 && args[1] == "train") {
    for (size_t i = 2; i < args.size(); ++i) {
      if (args[i] == "--config" && i + 1 < args.size())
        config_path = args[i + 1];
      else if (args[i].rfind("--config=", 0) == 0)
        config_path = args[i].substr(9);
    }
    if (!config_path.empty()) {
      std::set<std::string> flags;
      for (const CLI::Option* o : train->get_options())
        if (!o->get_lnames().empty()) flags.insert("--" + o->get_lnames().front());
      try {
        const std::vector<std::string> from_file = kiln::cli::config_arguments(
            config_path, flags, std::vector<std::string>(args.begin() + 2, args.end()));
        args.insert(args.begin() + 2, from_file.begin(), from_file.end());
      } catch (const kiln::Error& e) {
        std::cerr << "kiln: " << kiln::cli::without_call_site(e.what()) << '\n';
        return 1;
      }
    }
  }
  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  try {
    app.parse(static_cast<int>(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    if (code != 0 && !config_path.empty())
      std::cerr << "kiln: (the settings of --config " << config_path << " are read as flags)\n";
    return code;
  }
  for (const CLI::Option* o : train->get_options())
    if (o->count() > 0) t.given.insert(o->get_name());
  try {
    if (*train) return kiln::cli::run_train(t);
    if (*eval) return kiln::cli::run_eval(eval_dir, eval_data_dir, eval_batch);
    if (*predict) return kiln::cli::run_predict(p);
    if (*quantize) return kiln::cli::run_quantize(q);
    if (*board) return kiln::cli::run_board(b);
    if (*export_cmd) return kiln::cli::run_export(x);
    if (*inspect) return kiln::cli::run_inspect(inspect_dir, inspect_signature);
    if (*run_cmd) return kiln::cli::run_bundle(r);
    if (*graph) return kiln::cli::run_graph(g);
    return kiln::cli::run_summary(summary_model, summary_data);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: " << kiln::cli::without_call_site(e.what()) << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: " << kiln::cli::without_call_site(e.what()) << '\n';
    return 1;
  }
}
